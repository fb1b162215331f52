// Command ctxbench runs ctxd's benchmarks and evaluations and writes
// benchmark models. Unlike the operator's ctxctl it links the daemon and
// the engine: most commands start a private daemon in-process (or a ctxd
// process beside it) with --model and measure it in one run.
//
//	ctxbench [--socket PATH] bench|eval|gen-model ...
//
// Run "ctxbench help" for the commands and their flags.
//
// Files: main.go (the commands, run by cli.Main), daemon.go (private daemons), bench.go (the bench commands; socket, replay),
// resume.go (bench resume), crash.go (bench crash), fair.go (bench fair),
// speed.go (bench speed), tracebench.go (bench trace), httpbench.go (bench
// http), eval.go (the eval commands; eval recall), needle.go (needle trials of
// eval recall), ppl.go (eval ppl), scale.go (eval scale), genmodel.go
// (gen-model). The figures they measure are in docs/BENCHMARKS.md.
package main
