package worker

import (
	"flag"

	"github.com/sleipnir-serving/sleipnir/pkg/onnx"
)

// RegisterFlags binds the worker's settings to fs, the one place they are named as flags: `sleipnir worker` and
// `sleipnir up` take the same ones. The process's identity (--id) is the command's, not a setting: up names its
// workers itself.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	onnx.BindModelsDir(fs, &c.ModelsDir)
}
