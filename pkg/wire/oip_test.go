package wire

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/sleipnir-serving/sleipnir/internal/alloctest"
)

var pngMagic = []byte("\x89PNG\r\n\x1a\n....")

// binaryBody is an OIP body with the binary extension: the JSON header, then the raw bytes; and the header length.
func binaryBody(header string, raw ...[]byte) ([]byte, string) {
	body := []byte(header)
	for _, r := range raw {
		body = append(body, r...)
	}
	return body, fmt.Sprint(len(header))
}

func decodeBody(t *testing.T, body []byte, headerLength string) (OIPRequest, error) {
	t.Helper()
	head, bin, err := SplitBinaryBody(body, headerLength)
	if err != nil {
		return OIPRequest{}, err
	}
	return DecodeOIPRequest(head, bin)
}

func TestOIPBinaryInputs(t *testing.T) {
	prefixed := NewBytes("", [][]byte{[]byte("ab"), []byte("cde")}).Data
	fp := NewFP32("", []int64{2}, []float32{1.5, -2}).Data
	body, hl := binaryBody(`{"id":"r","inputs":[`+
		`{"name":"image","datatype":"BYTES","shape":[1],"parameters":{"binary_data_size":12}},`+
		`{"name":"words","datatype":"BYTES","shape":[2],"parameters":{"binary_data_size":13}},`+
		`{"name":"x","datatype":"FP32","shape":[2],"parameters":{"binary_data_size":8}},`+
		`{"name":"j","datatype":"INT64","shape":[1],"data":[7]}],`+
		`"outputs":[{"name":"text","parameters":{"binary_data":true}},{"name":"confidence"}]}`,
		pngMagic, prefixed, fp)
	req, err := decodeBody(t, body, hl)
	if err != nil {
		t.Fatal(err)
	}
	if req.ID != "r" || len(req.Inputs) != 4 {
		t.Fatalf("decoded %+v", req)
	}
	// A raw PNG (no length prefix) is the one element of a one-element BYTES tensor.
	if els, err := req.Inputs[0].Elements(); err != nil || len(els) != 1 || string(els[0]) != string(pngMagic) {
		t.Errorf("raw binary image decoded to %q, %v", els, err)
	}
	if s, err := req.Inputs[1].Strings(); err != nil || fmt.Sprint(s) != "[ab cde]" {
		t.Errorf("length-prefixed BYTES decoded to %v, %v", s, err)
	}
	if v, err := req.Inputs[2].FP32(); err != nil || fmt.Sprint(v) != "[1.5 -2]" {
		t.Errorf("binary FP32 decoded to %v, %v", v, err)
	}
	if v, err := req.Inputs[3].Int64(); err != nil || fmt.Sprint(v) != "[7]" {
		t.Errorf("JSON input next to binary ones decoded to %v, %v", v, err)
	}
	if !req.BinaryOutput("text") || req.BinaryOutput("confidence") || !req.Wants("confidence") || req.Wants("box") {
		t.Errorf("requested outputs read as %+v", req.Outputs)
	}
}

func TestOIPBase64Bytes(t *testing.T) {
	var tensor Tensor
	in := `{"name":"image","datatype":"BYTES","shape":[2],"parameters":{"content_type":"base64"},"data":["iVBORw0KGgo=","aGk="]}`
	if err := json.Unmarshal([]byte(in), &tensor); err != nil {
		t.Fatal(err)
	}
	if els, err := tensor.Elements(); err != nil || string(els[0]) != "\x89PNG\r\n\x1a\n" || string(els[1]) != "hi" {
		t.Errorf("base64 BYTES decoded to %q, %v", els, err)
	}
	// Without the content type a string is the element itself, as before.
	if err := json.Unmarshal([]byte(strings.Replace(in, `"parameters":{"content_type":"base64"},`, "", 1)), &tensor); err != nil {
		t.Fatal(err)
	}
	if s, _ := tensor.Strings(); s[1] != "aGk=" {
		t.Errorf("a BYTES string without content_type became %q", s[1])
	}
}

func TestOIPErrors(t *testing.T) {
	png := `{"inputs":[{"name":"image","datatype":"BYTES","shape":[1],"parameters":{"binary_data_size":%d}}]}`
	tests := []struct {
		name, header, headerLength string
		raw                        []byte
		want                       string
	}{
		{"size beyond the body", fmt.Sprintf(png, 1<<30), "", pngMagic, "binary_data_size 1073741824, but 12 bytes of binary data are left"},
		{"negative size", fmt.Sprintf(png, -1), "", pngMagic, "binary_data_size -1"},
		{"bytes left over", fmt.Sprintf(png, 4), "", pngMagic, "8 bytes of binary data follow the JSON header"},
		{"header length beyond the body", fmt.Sprintf(png, 12), "100000", pngMagic, "Inference-Header-Content-Length 100000: the body has only"},
		{"header length not a number", fmt.Sprintf(png, 12), "x", pngMagic, `Inference-Header-Content-Length "x"`},
		{"FP32 of the wrong size", `{"inputs":[{"name":"x","datatype":"FP32","shape":[2],"parameters":{"binary_data_size":12}}]}`, "", pngMagic, "12 bytes of data, want 8"},
		{"both data and binary", `{"inputs":[{"name":"x","datatype":"UINT8","shape":[1],"data":[1],"parameters":{"binary_data_size":1}}]}`, "", []byte{1}, "both data and binary_data_size"},
		{"BYTES of several elements, not prefixed", `{"inputs":[{"name":"x","datatype":"BYTES","shape":[2],"parameters":{"binary_data_size":12}}]}`, "", pngMagic, "BYTES element 0 claims"},
		{"bad base64", `{"inputs":[{"name":"x","datatype":"BYTES","shape":[1],"parameters":{"content_type":"base64"},"data":["%%%"]}]}`, "", nil, "data[0] is not base64"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body, hl := binaryBody(tc.header, tc.raw)
			if tc.headerLength != "" {
				hl = tc.headerLength
			}
			req, err := decodeBody(t, body, hl)
			if err == nil {
				// Some errors are the tensor's, found by Validate (as the frontend does after decoding).
				for _, in := range req.Inputs {
					if err = in.Validate(); err != nil {
						break
					}
				}
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	// JSON on its own (NATS) cannot point into a binary section.
	var tensor Tensor
	err := json.Unmarshal([]byte(`{"name":"x","datatype":"UINT8","shape":[1],"parameters":{"binary_data_size":1}}`), &tensor)
	if err == nil || !strings.Contains(err.Error(), "no binary section") {
		t.Errorf("binary_data_size without a binary section: %v", err)
	}
}

// A binary_data_size or a shape claiming more than the body holds allocates nothing for it.
func TestOIPClaimsAllocateNothing(t *testing.T) {
	header := `{"inputs":[{"name":"x","datatype":"BYTES","shape":[1000000000],"parameters":{"binary_data_size":8}}]}`
	raw := make([]byte, 8)
	binary.LittleEndian.PutUint32(raw, 1<<31)
	body, hl := binaryBody(header, raw)
	var err error
	n := alloctest.Bytes(func() { _, err = decodeBody(t, body, hl) })
	if err == nil {
		t.Fatal("a shape of 1e9 BYTES elements in 8 bytes was accepted")
	}
	if n > alloctest.JSONBound(len(body)) {
		t.Errorf("decoding allocated %d bytes for a claim its 8 bytes do not back", n)
	}
}

// FuzzDecodeOIP drives the OIP decoder with a body and its header length: it must never panic, never allocate more
// than the body's size allows, and what it accepts has inputs whose data lies in the body.
func FuzzDecodeOIP(f *testing.F) {
	body, hl := binaryBody(`{"inputs":[{"name":"image","datatype":"BYTES","shape":[1],"parameters":{"binary_data_size":12}}]}`, pngMagic)
	f.Add(body, hl)
	body, hl = binaryBody(`{"inputs":[{"name":"x","datatype":"FP32","shape":[1],"parameters":{"binary_data_size":4}},`+
		`{"name":"s","datatype":"BYTES","shape":[1],"parameters":{"content_type":"base64"},"data":["aGk="]}],`+
		`"outputs":[{"name":"y","parameters":{"binary_data":true}}],"parameters":{"binary_data_output":true}}`, []byte{0, 0, 128, 63})
	f.Add(body, hl)
	f.Add([]byte(`{"inputs":[{"name":"x","datatype":"BYTES","shape":[2],"parameters":{"binary_data_size":8}}]}`+"\xff\xff\xff\x7f\x00\x00\x00\x00"), "87")
	f.Add([]byte(`{"inputs":[]}`), "")
	f.Fuzz(func(t *testing.T, body []byte, headerLength string) {
		var req OIPRequest
		var err error
		n := alloctest.Bytes(func() {
			var head, bin []byte
			if head, bin, err = SplitBinaryBody(body, headerLength); err == nil {
				req, err = DecodeOIPRequest(head, bin)
			}
		})
		if n > alloctest.JSONBound(len(body)) {
			t.Fatalf("decoding %d bytes allocated %d", len(body), n)
		}
		if err != nil {
			return
		}
		for _, in := range req.Inputs {
			if in.Datatype == DatatypeBytes && in.Validate() != nil {
				t.Fatalf("accepted BYTES input %q whose data does not match its shape", in.Name)
			}
		}
	})
}
