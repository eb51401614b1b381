package onnxexec

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sleipnir-serving/sleipnir/pkg/executor"
	"github.com/sleipnir-serving/sleipnir/pkg/executor/emulated"
	"github.com/sleipnir-serving/sleipnir/pkg/ocr"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// fuzzSpec has an emulated root task with a child, so that the emulated executor emits sub-requests too.
const fuzzSpec = `
name: fuzz
slo_ms: 1000
batch_sizes: [1]
inputs:
  - {name: image, datatype: BYTES, shape: [1]}
  - {name: image, datatype: UINT8, shape: [-1, -1, 3]}
tasks:
  - name: a
    children: [b]
    variants:
      - {name: x, accuracy: 1, fanout: {mean: 2}, executor: {kind: emulated}, profile: [{batch: 1, p50_ms: 0.001, p95_ms: 0.001}]}
  - name: b
    variants:
      - {name: y, accuracy: 1, executor: {kind: emulated}, profile: [{batch: 1, p50_ms: 0.001, p95_ms: 0.001}]}
`

// FuzzTaskInputs decodes arbitrary bytes as a task message, as a worker does, and runs every input reader that
// reads an item's tensors before a model runs on it: the worker's own check (pipeline.Spec.CheckInputs, and
// well-formedness for child tasks), the OCR programs' (DecodeImage and their pre-processing, the box), the tensor
// program's and the emulated executor. None may panic, whoever sent the message (issue 35: an image whose H x W x 3
// wrapped around killed every worker it reached). Run:
// go test ./pkg/executor/onnxexec -run '^$' -fuzz FuzzTaskInputs -fuzztime 30s
func FuzzTaskInputs(f *testing.F) {
	spec, err := pipeline.Parse([]byte(fuzzSpec))
	if err != nil {
		f.Fatal(err)
	}
	for _, item := range fuzzSeeds(f) {
		data, err := msgpack.Marshal(&wire.TaskMessage{Items: []wire.Item{item}})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	em := emulated.New(spec, "a", spec.Variant("a", "x"), 1)
	f.Fuzz(func(t *testing.T, data []byte) {
		var tm wire.TaskMessage
		if wire.UnmarshalMsgpack(data, &tm) != nil {
			return
		}
		batch := make([]executor.Input, len(tm.Items))
		for i, it := range tm.Items {
			batch[i] = executor.Input{RequestID: "r", ItemID: it.ID, Tensors: it.Inputs}
			if spec.CheckInputs(it.Inputs) == nil && wire.ValidateTensors(it.Inputs) != nil {
				t.Fatalf("item %d passes the root check but not well-formedness", i)
			}
			ocr.BoxOf(it.Inputs)
		}
		_, imgs, _ := decodeImages(batch) // ocr-detect's and ocr-recognize's reader
		for _, img := range imgs {
			if b := img.Bounds(); int64(b.Dx())*int64(b.Dy()) > ocr.MaxImagePixels {
				t.Fatalf("an image of %v pixels was decoded, past the limit", b)
			}
			ocr.DetectorInput(make([]float32, 3*32*32), img, 32)
		}
		if len(imgs) > 0 {
			ocr.RecognizerInput(imgs, 8, 64)
		}
		tensorInputs(batch, []int64{-1, 4})
		if _, err := em.Execute(context.Background(), batch); err != nil {
			t.Fatal(err)
		}
	})
}

// fuzzSeeds are items of each kind the readers take, and the crafted one.
func fuzzSeeds(f *testing.F) []wire.Item {
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewRGBA(image.Rect(0, 0, 3, 2))); err != nil {
		f.Fatal(err)
	}
	pixels := wire.Tensor{Name: ocr.TensorImage, Datatype: "UINT8", Shape: []int64{2, 1, 3}, Data: make([]byte, 6)}
	return []wire.Item{
		{ID: "0", Den: 1, Inputs: []wire.Tensor{{Name: ocr.TensorImage, Datatype: "UINT8",
			Shape: []int64{274177, 67280421310721, 3}, Data: []byte{1, 2, 3}}}},
		{ID: "0", Den: 1, Inputs: []wire.Tensor{wire.NewBytes(ocr.TensorImage, [][]byte{b.Bytes()})}},
		{ID: "0.1", Den: 2, Inputs: []wire.Tensor{pixels, wire.NewFP32(ocr.TensorBox, []int64{4}, []float32{0, 0, 1, 2})}},
		{ID: "0", Den: 1, Inputs: []wire.Tensor{wire.NewFP32("x", []int64{2, 4}, make([]float32, 8))}},
	}
}
