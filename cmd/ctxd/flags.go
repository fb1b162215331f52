package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// invocation is what the command line asks for besides settings.
type invocation struct {
	cfg         *config
	printConfig bool
	showVersion bool
}

// flagSetting records a flag's text; it is applied after the file and the
// environment so that flags win.
type flagSetting struct {
	s       *setting
	pending *[]pendingFlag
}

type pendingFlag struct {
	s    *setting
	text string
}

func (f *flagSetting) String() string {
	if f == nil || f.s == nil {
		return ""
	}
	return f.s.toTOML()
}

func (f *flagSetting) Set(text string) error {
	*f.pending = append(*f.pending, pendingFlag{f.s, text})
	return nil
}

func (f *flagSetting) IsBoolFlag() bool { return f != nil && f.s != nil && f.s.isBool }

// errUsage is a command line the flag package refused (it has printed why).
var errUsage = errors.New("usage")

// parseInvocation merges defaults, the config file, the environment
// (lookup) and the flags in args. -h gives flag.ErrHelp; a bad command line
// errUsage; a bad value or file a *valueError or a wrapped errUnknownKey.
func parseInvocation(args []string, lookup func(string) (string, bool), stderr io.Writer) (*invocation, error) {
	inv := &invocation{cfg: newConfig()}
	cfg := inv.cfg
	fs := flag.NewFlagSet("ctxd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var pending []pendingFlag
	for _, s := range cfg.settings {
		fs.Var(&flagSetting{s: s, pending: &pending}, s.key, s.usage)
	}
	configPath := fs.String("config", "", "TOML config file (default $XDG_CONFIG_HOME/ctxd/ctxd.toml or ~/.config/ctxd/ctxd.toml; env CTXD_CONFIG)")
	fs.BoolVar(&inv.printConfig, "print-config", false, "print the merged configuration as TOML, each value's source as a comment, and exit")
	fs.BoolVar(&inv.showVersion, "version", false, "print the version and exit")
	fs.Usage = func() { usage(fs, cfg, stderr) }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "ctxd: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return nil, errUsage
	}
	if inv.showVersion {
		return inv, nil
	}

	path, explicit := *configPath, true
	if path == "" {
		path, _ = lookup("CTXD_CONFIG")
	}
	if path == "" {
		path, explicit = defaultConfigPath(), false
	}
	if path != "" {
		if err := cfg.loadFile(path, explicit); err != nil {
			return nil, err
		}
	}
	if err := cfg.loadEnv(lookup); err != nil {
		return nil, err
	}
	for _, p := range pending {
		if err := p.s.setText(p.text, "flag --"+p.s.key); err != nil {
			return nil, err
		}
	}
	cfg.resolveAuto()
	return inv, nil
}

func usage(fs *flag.FlagSet, cfg *config, w io.Writer) {
	fmt.Fprint(w, `Usage: ctxd [flags]

ctxd is the long-context KV sidecar daemon. Each setting below is read from
the config file (key = value), then CTXD_<KEY> environment variables, then
flags; the last one wins. ctxd --print-config shows the merged result.

Settings:
`)
	for _, s := range cfg.settings {
		arg := " " + s.typeName
		if s.isBool {
			arg = ""
		}
		fmt.Fprintf(w, "  --%s%s   (env %s, default %s)\n", s.key, arg, s.envVar(), s.toTOML())
		fmt.Fprintf(w, "        %s\n", s.usage)
	}
	fmt.Fprint(w, "\nOther flags:\n")
	for _, name := range []string{"config", "print-config", "version"} {
		f := fs.Lookup(name)
		fmt.Fprintf(w, "  --%s\n        %s\n", f.Name, f.Usage)
	}
	fmt.Fprint(w, strings.TrimLeft(`
Under systemd (deploy/systemd), ctxd serves the socket the manager passes
(LISTEN_FDS), reports readiness and status on NOTIFY_SOCKET and feeds the
watchdog (WATCHDOG_USEC).
`, "\n"))
}
