package ocr

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"image"
	"image/png"
	"strings"
	"testing"

	"github.com/sleipnir-serving/sleipnir/internal/alloctest"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// pngClaiming is a valid 1x1 PNG whose header is rewritten to claim w x h pixels (with a correct CRC).
func pngClaiming(t *testing.T, w, h uint32) []byte {
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewGray(image.Rect(0, 0, 1, 1))); err != nil {
		t.Fatal(err)
	}
	data := b.Bytes()
	// Signature (8), IHDR length (4), "IHDR" (4), width (4), height (4), 5 more bytes, then the CRC of type+data.
	binary.BigEndian.PutUint32(data[16:], w)
	binary.BigEndian.PutUint32(data[20:], h)
	binary.BigEndian.PutUint32(data[29:], crc32.ChecksumIEEE(data[12:29]))
	return data
}

// TestDecodeImageRefusesClaimedSizes: an image whose header claims 50000x50000 pixels is refused before anything is
// allocated for them (before the check, image.Decode tried to allocate 10 GB and the worker died).
func TestDecodeImageRefusesClaimedSizes(t *testing.T) {
	bomb := wire.NewBytes(TensorImage, [][]byte{pngClaiming(t, 50000, 50000)})
	var err error
	n := alloctest.Bytes(func() { _, err = DecodeImage([]wire.Tensor{bomb}) })
	if err == nil || !strings.Contains(err.Error(), "50000x50000") {
		t.Fatalf("DecodeImage of a header claiming 50000x50000: %v, want a refusal naming the size", err)
	}
	if n > 1<<20 {
		t.Fatalf("refusing the image allocated %d bytes", n)
	}
	// The same bytes claiming 1x1 decode: the refusal is the size, not the crafting.
	if _, err := DecodeImage([]wire.Tensor{wire.NewBytes(TensorImage, [][]byte{pngClaiming(t, 1, 1)})}); err != nil {
		t.Fatalf("a 1x1 PNG: %v", err)
	}
}

func TestDecodeImageErrors(t *testing.T) {
	tests := []struct {
		name string
		in   []wire.Tensor
		want string
	}{
		{"no image", []wire.Tensor{wire.NewFP32("x", []int64{1}, []float32{1})}, `no "image" input`},
		{"not an image", []wire.Tensor{wire.NewBytes("image", [][]byte{[]byte("hello")})}, "not a PNG or JPEG"},
		{"two images", []wire.Tensor{wire.NewBytes("image", [][]byte{{1}, {2}})}, "want one encoded image"},
		{"pixels shape", []wire.Tensor{{Name: "image", Datatype: "UINT8", Shape: []int64{2, 2}, Data: make([]byte, 4)}}, "UINT8 [H, W, 3]"},
		{"pixels short", []wire.Tensor{{Name: "image", Datatype: "UINT8", Shape: []int64{2, 2, 3}, Data: make([]byte, 5)}}, "5 bytes"},
		{"fp32", []wire.Tensor{wire.NewFP32("image", []int64{1}, []float32{1})}, "want BYTES"},
		// Issue 35: H x W x 3 wraps around to 3 in 64 bits; believed, image.NewRGBA panics.
		{"pixels wrapping around", []wire.Tensor{{Name: "image", Datatype: "UINT8", Shape: []int64{274177, 67280421310721, 3}, Data: make([]byte, 3)}}, "the limit is"},
		{"pixels over the limit", []wire.Tensor{{Name: "image", Datatype: "UINT8", Shape: []int64{8192, 8192, 3}, Data: make([]byte, 3)}}, "8192x8192 pixels"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeImage(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}
