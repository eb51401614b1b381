package up

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sleipnir-serving/sleipnir/internal/onnxtest"
	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/ocr"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
	"github.com/sleipnir-serving/sleipnir/services/worker"
)

// ocrSpec is the OCR pipeline on the real models that tests serve end to end.
const ocrSpec = onnxtest.OCRPipeline

// startOCRSystem serves ocrSpec on two workers, or skips the test without the models.
func startOCRSystem(t *testing.T) (*System, *pipeline.Spec) {
	models := onnxtest.Models(t, onnxtest.OCRModels...)
	return startSpecSystem(t, ocrSpec, Config{Workers: 2, Worker: worker.Config{ModelsDir: models}})
}

// startSpecSystem starts the system with cfg on a spec written out from specYAML.
func startSpecSystem(t *testing.T, specYAML string, cfg Config) (*System, *pipeline.Spec) {
	t.Helper()
	specFile := filepath.Join(t.TempDir(), "spec.yaml")
	if err := os.WriteFile(specFile, []byte(specYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	return startSystemWith(t, specFile, cfg)
}

// sendImages sends each image as a PNG request to pipeline, and returns the subjects the replies come on.
func sendImages(t *testing.T, c *testrig.Client, pipeline string, imgs []*image.RGBA) []string {
	t.Helper()
	var subjects []string
	for i, img := range imgs {
		var buf bytes.Buffer
		if err := png.Encode(&buf, img); err != nil {
			t.Fatal(err)
		}
		data, _ := msgpack.Marshal(&wire.InferRequest{ID: fmt.Sprint(i), Inputs: []wire.Tensor{wire.NewBytes(ocr.TensorImage, [][]byte{buf.Bytes()})}})
		subjects = append(subjects, c.Send(t, pipeline, data, nats.Header{wire.HeaderContentType: {wire.ContentMsgpack}}))
	}
	return subjects
}

// TestOCRPipelineServesImages runs the real OCR models through the whole system: a request carries a PNG, the
// detector's worker sends each line it finds to the recogniser's, and the one reply has the text and the box of
// every line, most of them read exactly.
func TestOCRPipelineServesImages(t *testing.T) {
	sys, spec := startOCRSystem(t)
	c := newClient(t, sys)
	fonts, _ := ocr.LoadFonts("")
	imgs, docs, err := ocr.Generate(4, 21, fonts)
	if err != nil {
		t.Fatal(err)
	}
	subjects := sendImages(t, c, spec.Name, imgs)
	// A request that is not an image gets an error reply of its own.
	bad, _ := msgpack.Marshal(&wire.InferRequest{Inputs: []wire.Tensor{wire.NewBytes(ocr.TensorImage, [][]byte{[]byte("no image")})}})
	badSubject := c.Send(t, spec.Name, bad, nats.Header{wire.HeaderContentType: {wire.ContentMsgpack}})
	replies := c.Wait(t, append(subjects, badSubject), 2*time.Minute)
	exact, lines := 0, 0
	for i, s := range subjects {
		if len(replies[s]) != 1 {
			t.Fatalf("request %d got %d replies", i, len(replies[s]))
		}
		rep := decodeReply(t, replies[s][0])
		if rep.Status != wire.StatusOK {
			t.Fatalf("request %d: %s %s", i, rep.Status, rep.Error)
		}
		var reads []ocr.Read
		for _, r := range rep.Results {
			if read, ok := ocr.ReadOf(r.Outputs); ok && len(r.Path) == 2 {
				reads = append(reads, read)
			}
		}
		sc := ocr.ScorePage(reads, docs[i].Lines)
		exact, lines = exact+sc.ExactLines, lines+sc.Lines
		if math.Abs(rep.Accuracy-0.75) > 1e-9 {
			t.Errorf("request %d: accuracy %g, want the path's 0.75", i, rep.Accuracy)
		}
	}
	if exact*2 < lines {
		t.Errorf("%d of %d lines read exactly through the system, want at least half", exact, lines)
	}
	if rep := decodeReply(t, replies[badSubject][0]); rep.Status != wire.StatusError || rep.Results[0].Reason == "" {
		t.Errorf("the request without an image: status %s, results %+v", rep.Status, rep.Results)
	}
}

// TestOCRPipelineOverHTTP sends a PNG through the OIP HTTP API as a curl user would: as raw bytes after the JSON
// header (the binary tensor data extension), and as base64 in JSON. Both are read; bytes that are not an image are
// a 422 saying so.
func TestOCRPipelineOverHTTP(t *testing.T) {
	sys, spec := startOCRSystem(t)
	srv := httptest.NewServer(sys.Frontend.Handler())
	defer srv.Close()
	fonts, _ := ocr.LoadFonts("")
	imgs, docs, err := ocr.Generate(1, 33, fonts)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, imgs[0]); err != nil {
		t.Fatal(err)
	}
	image := buf.Bytes()
	path := "/v2/models/" + spec.Name + "/infer"
	binaryRequest := func(data []byte) oipResponse {
		header := fmt.Sprintf(`{"inputs": [{"name": "image", "datatype": "BYTES", "shape": [1], "parameters": {"binary_data_size": %d}}]}`, len(data))
		return oipDo(t, srv.URL, "POST", path, map[string]string{wire.HeaderInferenceHeaderLength: fmt.Sprint(len(header))},
			bytes.NewReader(append([]byte(header), data...)))
	}
	base64Request := `{"inputs": [{"name": "image", "datatype": "BYTES", "shape": [1], "parameters": {"content_type": "base64"}, "data": ["` +
		base64.StdEncoding.EncodeToString(image) + `"]}]}`
	for what, r := range map[string]oipResponse{
		"binary":      binaryRequest(image),
		"base64 JSON": oipDo(t, srv.URL, "POST", path, nil, strings.NewReader(base64Request)),
	} {
		var rep struct {
			Status  string            `json:"status"`
			Results []wire.ItemResult `json:"results"`
		}
		if err := json.Unmarshal(r.body, &rep); err != nil || r.code != 200 || rep.Status != wire.StatusOK {
			t.Fatalf("%s: %d %s (%v)", what, r.code, r.body, err)
		}
		var reads []ocr.Read
		for _, res := range rep.Results {
			if read, ok := ocr.ReadOf(res.Outputs); ok {
				reads = append(reads, read)
			}
		}
		if sc := ocr.ScorePage(reads, docs[0].Lines); sc.ExactLines*2 < sc.Lines {
			t.Errorf("%s: %d of %d lines read exactly, want at least half: %+v", what, sc.ExactLines, sc.Lines, reads)
		} else {
			t.Logf("%s: %d of %d lines read exactly", what, sc.ExactLines, sc.Lines)
		}
	}
	r := binaryRequest([]byte("no image"))
	if msg, _ := r.json["error"].(string); r.code != 422 || !strings.Contains(msg, "not a PNG or JPEG image") {
		t.Errorf("bytes that are not an image: %d %s, want 422 saying so", r.code, r.body)
	}
}
