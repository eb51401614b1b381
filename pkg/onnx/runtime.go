// Package onnx runs ONNX models with ONNX Runtime (github.com/yalue/onnxruntime_go), whose shared library is loaded
// at run time: the project builds without it, and `make models` fetches it. One environment per process; a Session
// is one loaded model.
package onnx

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	ort "github.com/yalue/onnxruntime_go"
)

// Environment variables that locate the models directory and the runtime library.
const (
	EnvModels  = "SLEIPNIR_MODELS"
	EnvLibrary = "SLEIPNIR_ONNXRUNTIME_LIB"
)

// DefaultModelsDir is where `make models` puts what it fetches, relative to the repository.
const DefaultModelsDir = "models"

// ModelsDir is $SLEIPNIR_MODELS, or DefaultModelsDir.
func ModelsDir() string {
	if d := os.Getenv(EnvModels); d != "" {
		return d
	}
	return DefaultModelsDir
}

// BindModelsDir binds the --models flag, where onnx variants' model files and the ONNX Runtime library are, to dst
// (default ModelsDir), for every command that runs models.
func BindModelsDir(fs *flag.FlagSet, dst *string) {
	fs.StringVar(dst, "models", ModelsDir(), "`DIR` of the ONNX models and runtime that make models fetches (env "+
		EnvModels+"; the library: env "+EnvLibrary+")")
}

// LibraryPath is $SLEIPNIR_ONNXRUNTIME_LIB, or the library `make models` puts under modelsDir.
func LibraryPath(modelsDir string) string {
	if p := os.Getenv(EnvLibrary); p != "" {
		return p
	}
	return filepath.Join(modelsDir, "onnxruntime", "libonnxruntime.so.1")
}

// ErrNoRuntime says the shared library is missing; the message says how to get it.
var ErrNoRuntime = errors.New("ONNX Runtime library not found")

var initMu sync.Mutex

// Init loads the ONNX Runtime library at libPath and creates the process's environment. ONNX Runtime allows one
// environment per process: once one library is loaded, it serves every later caller, whatever path they name.
func Init(libPath string) error {
	initMu.Lock()
	defer initMu.Unlock()
	if ort.IsInitialized() {
		return nil
	}
	if _, err := os.Stat(libPath); err != nil {
		return fmt.Errorf("%w at %s: run `make models`, or set %s to libonnxruntime.so (>= 1.24)", ErrNoRuntime, libPath, EnvLibrary)
	}
	ort.SetSharedLibraryPath(libPath)
	if err := ort.InitializeEnvironment(ort.WithLogLevelError()); err != nil {
		return fmt.Errorf("loading ONNX Runtime from %s: %w", libPath, err)
	}
	return nil
}

// Version is the loaded runtime's version ("" before Init).
func Version() string {
	if !ort.IsInitialized() {
		return ""
	}
	return ort.GetVersion()
}
