package allocate

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

// Loki-like instances: pipelines of the shape of Loki's traffic analysis (HPDC'24, section 6), the shape on which a
// solve of 11.7 s was seen from outside the team (on Loki's own profiles, not these): a detector family whose largest variant finds about 18 objects a frame, then a classifier
// family (two tasks, examples/traffic-camera.yaml), and with a third task, either a second classifier beside the
// first (Loki's own tree: cars and faces) or one after it (each classified vehicle's plate read). 20 servers, SLO
// 250 ms. seed 0 is the camera's profiles; other seeds scale each family's latencies by 0.8-1.2 and the fan-outs
// by 0.8-1.25 (the largest 14-22), and draw Poisson fan-outs for one seed in three.

// lokiShapes are the shapes of lokiLike.
var lokiShapes = []string{"chain2", "tree3", "chain3"}

// lokiLike is the Loki-like pipeline of the given shape and seed.
func lokiLike(t testing.TB, shape string, seed uint64) *pipeline.Spec {
	t.Helper()
	spec, err := pipeline.Load("../../examples/traffic-camera.yaml")
	if err != nil {
		t.Fatal(err)
	}
	spec.Name = fmt.Sprintf("loki-%s-%d", shape, seed)
	r := rand.New(rand.NewPCG(seed, 0x10c1))
	scale := func(v *pipeline.Variant, f float64) {
		for i := range v.Profile {
			v.Profile[i].P50Ms = math.Round(v.Profile[i].P50Ms*f*100) / 100
			v.Profile[i].P95Ms = math.Round(v.Profile[i].P95Ms*f*100) / 100
		}
	}
	detect, classify := &spec.Tasks[0], &spec.Tasks[1]
	if seed > 0 {
		fd, fc, ff := 0.8+0.4*r.Float64(), 0.8+0.4*r.Float64(), 0.8+0.45*r.Float64()
		poisson := r.IntN(3) == 0
		for vi := range detect.Variants {
			v := &detect.Variants[vi]
			scale(v, fd)
			v.Fanout.Mean = math.Round(v.Fanout.Mean*ff*10) / 10
			if poisson {
				v.Fanout.Distribution, v.Fanout.Dispersion = pipeline.FanoutPoisson, 0
			}
		}
		for vi := range classify.Variants {
			scale(&classify.Variants[vi], fc)
		}
	}
	third := pipeline.Task{Name: "third"}
	for _, v := range classify.Variants {
		v.Profile = append([]pipeline.ProfilePoint(nil), v.Profile...)
		scale(&v, 0.6)
		v.Accuracy = math.Round((v.Accuracy+0.1)*1000) / 1000
		third.Variants = append(third.Variants, v)
	}
	switch shape {
	case "chain2":
	case "tree3": // cars to the classifier, faces to the third task
		third.Name = "recognize_face"
		detect.Children = []string{classify.Name, third.Name}
		for vi := range detect.Variants {
			detect.Variants[vi].Fanout.Shares = map[string]float64{classify.Name: 0.7, third.Name: 0.3}
		}
		spec.Tasks = append(spec.Tasks, third)
	case "chain3": // every classified vehicle's plate read
		third.Name = "read_plate"
		classify = &spec.Tasks[1]
		classify.Children = []string{third.Name}
		for vi := range classify.Variants {
			classify.Variants[vi].Fanout = &pipeline.Fanout{Mean: 1, Distribution: pipeline.FanoutFixed}
		}
		spec.Tasks = append(spec.Tasks, third)
	default:
		t.Fatalf("no Loki-like shape %q", shape)
	}
	// Through the parser, which validates the spec and completes it as it does a file.
	data, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	if spec, err = pipeline.ParseJSON(data); err != nil {
		t.Fatal(err)
	}
	return spec
}
