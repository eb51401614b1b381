package main

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sleipnir-serving/sleipnir/pkg/ocr"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// requestPayloads are the requests' bodies, sent in turn: one image each of cfg.Images, else one FP32 tensor
// "image" of cfg.InputShape with values drawn from rng.
func requestPayloads(cfg Config, rng *rand.Rand) ([][]byte, error) {
	n, err := wire.NumElements(cfg.InputShape)
	if err != nil {
		return nil, err
	}
	// Drawn with images too, so that the arrivals drawn after them are the seed's either way.
	values := make([]float32, n)
	for i := range values {
		values[i] = rng.Float32()
	}
	payload, err := msgpack.Marshal(&wire.InferRequest{Inputs: []wire.Tensor{wire.NewFP32("image", cfg.InputShape, values)}})
	if err != nil {
		return nil, err
	}
	if cfg.Images != nil {
		return imagePayloads(cfg.Images)
	}
	return [][]byte{payload}, nil
}

// parseShape reads "64,192".
func parseShape(s string) ([]int64, error) {
	var out []int64
	for _, f := range strings.Split(s, ",") {
		d, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil || d < 1 {
			return nil, fmt.Errorf("--input-shape %q: want positive integers separated by commas", s)
		}
		out = append(out, d)
	}
	return out, nil
}

// imagePayloads encodes one request per image of a labelled set: the PNG as a BYTES tensor "image".
func imagePayloads(set *ocr.Set) ([][]byte, error) {
	out := make([][]byte, len(set.Documents))
	for i := range set.Documents {
		b, err := set.ImageBytes(i)
		if err != nil {
			return nil, err
		}
		if out[i], err = msgpack.Marshal(&wire.InferRequest{Inputs: []wire.Tensor{wire.NewBytes(ocr.TensorImage, [][]byte{b})}}); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ocrReads are the lines an OCR reply carries: each finished leaf's text and box.
func ocrReads(results []wire.ItemResult) []ocr.Read {
	var reads []ocr.Read
	for _, it := range results {
		if read, ok := ocr.ReadOf(it.Outputs); ok {
			reads = append(reads, read)
		}
	}
	return reads
}
