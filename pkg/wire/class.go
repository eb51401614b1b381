package wire

import "strings"

// Server classes. A cluster mixes kinds of server (accelerator generations, CPU nodes), each a class with a name and
// an hourly price. A model variant that runs on several classes is hosted as one variant per class, named
// "model@class" (VariantOn): each is its own subject, consumer, routing entry, latency budget and measured profile,
// so that routing weighs a class's replicas by their own throughput and a worker pulls only its own class's work. On
// the default class the name is the model's alone, as in a cluster of one kind.

// DefaultClass is the class of a worker that declares none, and of a variant's `profile`.
const DefaultClass = "default"

// classSeparator joins a model's name and its class in a hosted variant's name.
const classSeparator = "@"

// VariantOn is the name of model variant model hosted on class: "model@class", or model on the default class.
func VariantOn(model, class string) string {
	if class == "" || class == DefaultClass {
		return model
	}
	return model + classSeparator + class
}

// SplitVariant reads a hosted variant's name back into its model and class (DefaultClass when it names none).
func SplitVariant(variant string) (model, class string) {
	model, class, ok := strings.Cut(variant, classSeparator)
	if !ok {
		return variant, DefaultClass
	}
	return model, class
}

// ClassOf is the class a hosted variant runs on.
func ClassOf(variant string) string {
	_, class := SplitVariant(variant)
	return class
}

// ValidVariantName reports whether s may name a hosted variant: a valid name, or "model@class" with both valid names
// and the class not the default one (whose variants carry the model's name alone).
func ValidVariantName(s string) bool {
	model, class, ok := strings.Cut(s, classSeparator)
	if !ok {
		return ValidName(s)
	}
	return ValidName(model) && ValidName(class) && class != DefaultClass
}
