package llama

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include <dlfcn.h>
#include "ggml-backend.h"

extern void ctxdLlamaLog(int level, char *text);

static void ctxd_ggml_log_cb(enum ggml_log_level level, const char *text, void *user) {
	(void)user;
	ctxdLlamaLog((int)level, (char *)text);
}

// ctxd_route_base_log points the log of a libggml-base.so that a loaded
// backend brought along (its own copy, with its own logger writing to
// stderr) at ctxd's log. It returns 0 when that library is not loaded.
static int ctxd_route_base_log(const char *path) {
	void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
	if (h == NULL) return 0;
	void (*set)(ggml_log_callback, void *) = (void (*)(ggml_log_callback, void *))dlsym(h, "ggml_log_set");
	if (set != NULL) set(ctxd_ggml_log_cb, NULL);
	dlclose(h);
	return set != NULL;
}
*/
import "C"

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"

	"github.com/ctxd/ctxd/engine"
)

// ErrNoBackends reports a backend folder holding no loadable backend; it
// is engine.ErrNoBackends.
var ErrNoBackends = engine.ErrNoBackends

// backends records the folders already loaded: ggml keeps a backend
// registered for the life of the process, so a folder is loaded once.
var backends struct {
	sync.Mutex
	dirs map[string]error
}

// LoadBackends registers the ggml backend libraries (libggml-vulkan.so,
// libggml-cuda.so, …) found in dir with ggml, so that their devices can be
// offloaded to. It must run before a model is loaded onto them. A folder
// without backend libraries gives ErrNoBackends (and nothing changes); the
// devices registered afterwards are returned by Devices.
func LoadBackends(dir string) error {
	backendInit()
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrNoBackends, dir, err)
	}
	backends.Lock()
	defer backends.Unlock()
	if err, ok := backends.dirs[abs]; ok {
		return err
	}
	if backends.dirs == nil {
		backends.dirs = map[string]error{}
	}
	libs, _ := filepath.Glob(filepath.Join(abs, "libggml-*.so"))
	var found []string
	for _, l := range libs {
		if b := filepath.Base(l); b != "libggml-base.so" {
			found = append(found, b)
		}
	}
	if len(found) == 0 {
		if _, serr := os.Stat(abs); serr != nil {
			err = fmt.Errorf("%w: %w", ErrNoBackends, serr)
		} else {
			err = fmt.Errorf("%w in %s", ErrNoBackends, abs)
		}
		backends.dirs[abs] = err
		return err
	}
	before := C.ggml_backend_reg_count()
	cdir := C.CString(abs)
	defer C.free(unsafe.Pointer(cdir))
	C.ggml_backend_load_all_from_path(cdir)
	if base, _ := filepath.Glob(filepath.Join(abs, "libggml-base.so*")); len(base) > 0 {
		for _, b := range base {
			cb := C.CString(b)
			C.ctxd_route_base_log(cb)
			C.free(unsafe.Pointer(cb))
		}
	}
	if C.ggml_backend_reg_count() == before {
		err = fmt.Errorf("%w: %s holds %s but ggml registered none (driver or libggml-base missing? see the log)",
			ErrNoBackends, abs, strings.Join(found, ", "))
	}
	backends.dirs[abs] = err
	return err
}

// Devices lists the devices ggml can run on now, the CPU included, with
// their free memory as of this call.
func Devices() []engine.Device {
	backendInit()
	n := int(C.ggml_backend_dev_count())
	out := make([]engine.Device, 0, n)
	for i := 0; i < n; i++ {
		out = append(out, device(C.ggml_backend_dev_get(C.size_t(i))))
	}
	return out
}

func device(d C.ggml_backend_dev_t) engine.Device {
	var free, total C.size_t
	C.ggml_backend_dev_memory(d, &free, &total)
	kind := engine.DeviceCPU
	switch C.ggml_backend_dev_type(d) {
	case C.GGML_BACKEND_DEVICE_TYPE_GPU:
		kind = engine.DeviceGPU
	case C.GGML_BACKEND_DEVICE_TYPE_IGPU:
		kind = engine.DeviceIGPU
	case C.GGML_BACKEND_DEVICE_TYPE_ACCEL:
		kind = engine.DeviceAccel
	}
	return engine.Device{
		Name:        C.GoString(C.ggml_backend_dev_name(d)),
		Description: C.GoString(C.ggml_backend_dev_description(d)),
		Backend:     C.GoString(C.ggml_backend_reg_name(C.ggml_backend_dev_backend_reg(d))),
		Kind:        kind,
		FreeBytes:   int64(free),
		TotalBytes:  int64(total),
	}
}

// deviceByName finds a registered device.
func deviceByName(name string) (C.ggml_backend_dev_t, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	d := C.ggml_backend_dev_by_name(cname)
	if d == nil {
		var names []string
		for _, dv := range Devices() {
			names = append(names, dv.Name)
		}
		return nil, fmt.Errorf("%w: no device %q (devices: %s)", engine.ErrInvalidArgument, name, strings.Join(names, ", "))
	}
	return d, nil
}
