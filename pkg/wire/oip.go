package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// The KServe Open Inference Protocol v2 (OIP) as the frontend's HTTP API speaks it, with its binary tensor data
// extension: a request body is a JSON header of HeaderInferenceHeaderLength bytes followed by the raw bytes of the
// inputs whose parameters give a ParamBinaryDataSize, in the order of the inputs. JSON requests on NATS are decoded
// the same way: this is the JSON request format of both APIs (schemas/README.md), so it lives here, not in the
// frontend, beside the tensor data decoding it shares with Tensor.UnmarshalJSON (decodeJSONData).
const (
	// HeaderInferenceHeaderLength is the length of the JSON header of a body that carries binary tensor data.
	HeaderInferenceHeaderLength = "Inference-Header-Content-Length"
	// ContentOctetStream is the Content-Type of an HTTP response carrying binary tensor data.
	ContentOctetStream = "application/octet-stream"

	// ParamBinaryDataSize, on an input or output, is the size of its data in the binary section.
	ParamBinaryDataSize = "binary_data_size"
	// ParamBinaryData, on a requested output, asks for its data in the binary section.
	ParamBinaryData = "binary_data"
	// ParamBinaryDataOutput, on a request, asks for every output's data in the binary section.
	ParamBinaryDataOutput = "binary_data_output"
	// ParamContentType on an input says how its JSON data is encoded; ContentTypeBase64: each BYTES element is a
	// base64 string (standard alphabet), as MLServer writes it.
	ParamContentType  = "content_type"
	ContentTypeBase64 = "base64"

	// ExtensionBinaryTensorData is the name of the binary extension in the server metadata.
	ExtensionBinaryTensorData = "binary_tensor_data"
)

// TensorParams are the parameters of a tensor in an OIP request or response that Sleipnir reads or writes.
type TensorParams struct {
	BinaryDataSize *int   `json:"binary_data_size,omitempty"`
	ContentType    string `json:"content_type,omitempty"`
	BinaryData     bool   `json:"binary_data,omitempty"`
}

// RequestedOutput is one entry of an OIP request's "outputs": an output the client wants, and how.
type RequestedOutput struct {
	Name       string       `json:"name"`
	Parameters TensorParams `json:"parameters"`
}

// OIPRequest is a decoded OIP request: the inputs, and which outputs the client asked for.
type OIPRequest struct {
	InferRequest
	// Outputs, when not empty, names the outputs to return (by tensor name, whatever leaf holds them).
	Outputs []RequestedOutput
	// BinaryOutputs asks for every output in the binary section (the request's binary_data_output).
	BinaryOutputs bool
}

// BinaryOutput says whether the output named name goes in the binary section.
func (r *OIPRequest) BinaryOutput(name string) bool {
	for _, o := range r.Outputs {
		if o.Name == name {
			return o.Parameters.BinaryData || r.BinaryOutputs
		}
	}
	return r.BinaryOutputs
}

// Wants says whether the client asked for the output named name (every output when it named none).
func (r *OIPRequest) Wants(name string) bool {
	if len(r.Outputs) == 0 {
		return true
	}
	for _, o := range r.Outputs {
		if o.Name == name {
			return true
		}
	}
	return false
}

// oipInput is an input as the JSON header writes it; Data is absent when it is in the binary section.
type oipInput struct {
	Name       string          `json:"name"`
	Datatype   string          `json:"datatype"`
	Shape      []int64         `json:"shape"`
	Parameters TensorParams    `json:"parameters"`
	Data       json.RawMessage `json:"data"`
}

type oipRequestJSON struct {
	ID         string     `json:"id"`
	Inputs     []oipInput `json:"inputs"`
	Parameters struct {
		BinaryDataOutput bool `json:"binary_data_output"`
	} `json:"parameters"`
	Outputs []RequestedOutput `json:"outputs"`
}

// SplitBinaryBody splits a body into its JSON header and binary section by the HeaderInferenceHeaderLength value
// (empty: the whole body is JSON). The length is checked against the body before anything is cut.
func SplitBinaryBody(body []byte, headerLength string) (header, binarySection []byte, err error) {
	if headerLength == "" {
		return body, nil, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(headerLength))
	if err != nil || n < 0 {
		return nil, nil, fmt.Errorf("%s %q: want the JSON header's length in bytes", HeaderInferenceHeaderLength, headerLength)
	}
	if n > len(body) {
		return nil, nil, fmt.Errorf("%s %d: the body has only %d bytes", HeaderInferenceHeaderLength, n, len(body))
	}
	return body[:n], body[n:], nil
}

// DecodeOIPRequest decodes an OIP request: its JSON header and the binary section after it (nil without the binary
// extension). Every binary_data_size is checked against the bytes left before it is taken; the data of binary
// inputs shares binarySection's memory.
func DecodeOIPRequest(header, binarySection []byte) (OIPRequest, error) {
	var js oipRequestJSON
	if err := json.Unmarshal(header, &js); err != nil {
		return OIPRequest{}, err
	}
	req := OIPRequest{InferRequest: InferRequest{ID: js.ID}, Outputs: js.Outputs,
		BinaryOutputs: js.Parameters.BinaryDataOutput}
	rest := binarySection
	req.Inputs = make([]Tensor, len(js.Inputs))
	for i, in := range js.Inputs {
		t := Tensor{Name: in.Name, Datatype: in.Datatype, Shape: in.Shape}
		if size := in.Parameters.BinaryDataSize; size != nil {
			if len(in.Data) > 0 && !bytes.Equal(bytes.TrimSpace(in.Data), []byte("null")) {
				return OIPRequest{}, fmt.Errorf("inputs[%d] %q: both data and %s", i, in.Name, ParamBinaryDataSize)
			}
			if *size < 0 || *size > len(rest) {
				return OIPRequest{}, fmt.Errorf("inputs[%d] %q: %s %d, but %d bytes of binary data are left",
					i, in.Name, ParamBinaryDataSize, *size, len(rest))
			}
			data := rest[:*size:*size]
			rest = rest[*size:]
			if t.Datatype == DatatypeBytes {
				if data, err := binaryBytesElements(data, t.Shape); err == nil {
					t.Data = data
				} else {
					return OIPRequest{}, fmt.Errorf("inputs[%d]: %w", i, err)
				}
			} else {
				t.Data = data
			}
			req.Inputs[i] = t
			continue
		}
		if err := t.decodeJSONData(in.Data, in.Parameters.ContentType); err != nil {
			return OIPRequest{}, err
		}
		req.Inputs[i] = t
	}
	if len(rest) > 0 {
		return OIPRequest{}, fmt.Errorf("%d bytes of binary data follow the JSON header that no input's %s accounts for",
			len(rest), ParamBinaryDataSize)
	}
	return req, nil
}

// binaryBytesElements reads a BYTES input's binary data: its elements, each after a 4-byte little-endian length, as
// the extension writes them; a one-element tensor may also be the raw bytes alone (a PNG sent with curl as it is),
// taken so when they are not one length-prefixed element.
func binaryBytesElements(data []byte, shape []int64) ([]byte, error) {
	n, err := NumElements(shape)
	if err != nil {
		return nil, err
	}
	if _, err := splitBytes(data, n); err == nil {
		return data, nil
	} else if n != 1 {
		return nil, err
	}
	out := make([]byte, 4+len(data))
	binary.LittleEndian.PutUint32(out, uint32(len(data)))
	copy(out[4:], data)
	return out, nil
}

// BinaryHeader is a tensor's JSON in an OIP response whose data is in the binary section: no data, its size in
// the parameters.
func (t Tensor) BinaryHeader() any {
	size := len(t.Data)
	shape := t.Shape
	if shape == nil {
		shape = []int64{}
	}
	return struct {
		Name       string       `json:"name"`
		Datatype   string       `json:"datatype"`
		Shape      []int64      `json:"shape"`
		Parameters TensorParams `json:"parameters"`
	}{t.Name, t.Datatype, shape, TensorParams{BinaryDataSize: &size}}
}

// decodeBase64Elements decodes base64 BYTES elements into the length-prefixed layout of Tensor.Data.
func decodeBase64Elements(name string, flat []any) ([]byte, error) {
	var b bytes.Buffer
	for i, v := range flat {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("tensor %q: data[%d] is not a string", name, i)
		}
		e, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("tensor %q: data[%d] is not base64 (%s %q): %v", name, i, ParamContentType, ContentTypeBase64, err)
		}
		var l [4]byte
		binary.LittleEndian.PutUint32(l[:], uint32(len(e)))
		b.Write(l[:])
		b.Write(e)
	}
	return b.Bytes(), nil
}
