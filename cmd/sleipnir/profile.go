package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"

	"github.com/sleipnir-serving/sleipnir/pkg/ocr"
	"github.com/sleipnir-serving/sleipnir/pkg/onnx"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
	"github.com/sleipnir-serving/sleipnir/tools/profiler"
)

// runProfile measures an OCR pipeline's variants and writes the profile file its spec names.
func runProfile(args []string) error {
	fs := flag.NewFlagSet("profile", flag.ContinueOnError)
	specPath := fs.String("pipeline", "examples/ocr.yaml", "pipeline spec YAML `FILE` (its profiles field names the file written)")
	data := fs.String("data", envOr("SLEIPNIR_OCR_DATA", "data/ocr"), "`DIR` of the labelled set that sleipnir ocrdata makes (env SLEIPNIR_OCR_DATA)")
	var models string
	onnx.BindModelsDir(fs, &models)
	images := fs.Int("images", 0, "images of the labelled set to measure accuracy on (0: all)")
	reps := fs.Int("repetitions", 10, "timed batches per variant and batch size")
	out := fs.String("out", "", "profile file to write (default: the one the spec names)")
	class := fs.String("class", envOr("SLEIPNIR_CLASS", wire.DefaultClass), "server `CLASS` this machine is: the "+
		"profiles are recorded as that class's (its class_profiles; the default class's is each variant's profile), "+
		"and the file's measurements of other classes are kept (docs/classes.md; env SLEIPNIR_CLASS)")
	progress := fs.Bool("progress", isTerminal(os.Stderr), "show a progress bar on standard error (default: when it is a terminal)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if !wire.ValidName(*class) {
		return fmt.Errorf("--class %q: want a name of [A-Za-z0-9_-]", *class)
	}
	spec, err := pipeline.LoadForProfiling(*specPath)
	if err != nil {
		return err
	}
	if *out == "" {
		if spec.Profiles == "" {
			return fmt.Errorf("%s names no profile file (profiles:); pass --out", *specPath)
		}
		*out = filepath.Join(filepath.Dir(*specPath), spec.Profiles)
	}
	set, err := ocr.ReadSet(*data)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cfg := profiler.Config{Spec: spec, Set: set, ModelsDir: models, Images: *images, Repetitions: *reps}
	if *progress {
		cfg.Progress = func(done, total int, what string) {
			drawBar(float64(done)/float64(total), what)
			if done == total {
				fmt.Fprintln(os.Stderr)
			}
		}
	}
	res, err := profiler.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if err := onClass(&res.File, *class, *out); err != nil {
		return err
	}
	cmd := "sleipnir profile " + strings.Join(args, " ")
	if err := pipeline.WriteProfileFile(*out, &res.File, profiler.Header(strings.TrimSpace(cmd))); err != nil {
		return err
	}
	res.WriteTable(os.Stdout)
	fmt.Printf("\nwrote %s (%d images, %d repetitions, %s)\n", *out, res.File.Measured.Images, res.File.Measured.Repetitions, res.File.Measured.Runtime)
	return nil
}

// onClass records pf's measurements as class's and keeps, from the profile file at path when there is one, the
// measurements of the other classes: profiling on one class leaves the others' profiles as they were.
func onClass(pf *pipeline.ProfileFile, class, path string) error {
	if class == wire.DefaultClass {
		class = "" // the variant's own profile
	}
	for i := range pf.Variants {
		pf.Variants[i].Class = class
	}
	old, err := pipeline.ReadProfileFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("keeping the other classes' profiles: %w", err)
	}
	for _, vp := range old.Variants {
		if vp.Class != class {
			pf.Variants = append(pf.Variants, vp)
		}
	}
	return nil
}

// runOCRData generates the labelled OCR set.
func runOCRData(args []string) error {
	fs := flag.NewFlagSet("ocrdata", flag.ContinueOnError)
	out := fs.String("out", "data/ocr", "directory to write the images and labels.json into")
	n := fs.Int("images", 200, "number of images")
	seed := fs.Uint64("seed", 1, "seed: the same seed and fonts give the same set")
	fonts := fs.String("fonts", "", "directory with Debian's DejaVu fonts (fonts-dejavu-core), used beside Go's own fonts; empty: Go's only")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *n < 1 {
		return fmt.Errorf("--images %d: want at least 1", *n)
	}
	fl, err := ocr.LoadFonts(*fonts)
	if err != nil {
		return err
	}
	set, err := ocr.WriteSet(*out, *n, *seed, fl)
	if err != nil {
		return err
	}
	lines := 0
	for _, d := range set.Documents {
		lines += len(d.Lines)
	}
	fmt.Printf("wrote %d images (%d lines, fonts %s) and %s into %s\n", len(set.Documents), lines, strings.Join(set.Fonts, ", "), ocr.LabelsFile, *out)
	return nil
}
