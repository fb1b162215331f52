//go:build tools

// Package tools pins modules the build needs but no package imports:
// github.com/gen2brain/malgo ships miniaudio.h, which llama.cpp's vendored
// sources include (see Makefile, target headers).
package tools

import _ "github.com/gen2brain/malgo"
