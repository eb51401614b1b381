// Package all registers every executor kind (emulated and onnx): a program that loads variants of any kind, such as
// the worker, imports it for that effect. The simulator imports executor/emulated alone.
package all

import (
	_ "github.com/sleipnir-serving/sleipnir/pkg/executor/emulated" // kind emulated
	_ "github.com/sleipnir-serving/sleipnir/pkg/executor/onnxexec" // kind onnx
)
