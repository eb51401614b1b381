// Package pipeline defines the pipeline specification: a rooted tree of tasks, the model variants of each task with
// their profiles, the end-to-end SLO, and an optional static allocation. It is pure: no NATS, no I/O beyond reading
// the spec file.
package pipeline

// Spec is a pipeline specification as written in a YAML file (see schemas/pipeline.schema.json).
type Spec struct {
	// Name identifies the pipeline in subjects and KV keys: [a-z0-9_-], at most 32 characters.
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// SLOMs is the end-to-end latency objective in milliseconds.
	SLOMs float64 `json:"slo_ms"`
	// CommLatencyMs is the communication latency of one hop, subtracted from the SLO per hop by the planner.
	CommLatencyMs float64 `json:"comm_latency_ms,omitempty"`
	// DeadlinePolicy is how workers treat items running late: none, last-task, per-task, reroute (default) or degrade.
	DeadlinePolicy string `json:"deadline_policy,omitempty"`
	// RoutingMode is how each item's variant is chosen: "tables" (the default: the plan's routing tables),
	// "queue" (the most accurate variant whose measured queue and latency fit the item's deadline, the tables as
	// the fallback: pkg/routing.ChooseByQueue) or "ramsis" (from the same queues by a policy computed by value
	// iteration: pkg/ramsis).
	RoutingMode string `json:"routing_mode,omitempty"`
	// ArrivalCV is the coefficient of variation of the times between requests that routing_mode ramsis computes
	// its policies for (Gamma arrivals; 0 means 1, Poisson).
	ArrivalCV float64 `json:"arrival_cv,omitempty"`
	// Priority is the pipeline's class, 0 (the default) to MaxPriority: when the cluster cannot serve every
	// pipeline, the lower classes give up accuracy first and are shed first (the rule: schemas/README.md). A
	// request may ask for a lower class than its pipeline's (the Sleipnir-Priority header), never a higher one.
	Priority int `json:"priority,omitempty"`
	// MinAccuracy, when positive, is a floor on the system accuracy, in (0, 1]: plans use the fewest servers (on a
	// priced cluster, the least cost) whose system accuracy is at least it; when the cluster cannot serve the demand
	// at it, the plan serves what it can at it and the frontends refuse the rest (pkg/allocate floor.go).
	MinAccuracy float64 `json:"min_accuracy,omitempty"`
	// BatchSizes are the allowed maximum batch sizes; every profile lists exactly these. Default [1].
	BatchSizes []int `json:"batch_sizes,omitempty"`
	// Profiles names the profile file (relative to the spec file) whose measurements Load merged into the variants
	// and PathAccuracy; see ProfileFile.
	Profiles string `json:"profiles,omitempty"`
	// Tasks form a rooted tree through Children (but for a join task, which several tasks list: Task.Join); the root
	// is the one task no other task lists as a child.
	Tasks []Task `json:"tasks"`
	// PathAccuracy optionally overrides the end-to-end accuracy of a root-to-leaf path of variants; a path not
	// listed defaults to the product of its variants' accuracies.
	PathAccuracy []PathAccuracy `json:"path_accuracy,omitempty"`
	// Allocation is an optional static plan: which variants to host, with how many replicas and which max batch.
	Allocation []Allocation `json:"allocation,omitempty"`
	// Inputs declares the tensors a request carries and Outputs those each result of the reply holds: the KServe v2
	// model metadata of the pipeline. Optional; when declared, every request (and every root task message) is
	// checked against Inputs (CheckInputs), and an input may be declared once per datatype it may come as.
	Inputs  []TensorSpec `json:"inputs,omitempty"`
	Outputs []TensorSpec `json:"outputs,omitempty"`
}

// TensorSpec declares one input or output tensor: its name, datatype (a KServe v2 datatype) and shape, where -1 is
// a dimension of any size.
type TensorSpec struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape" yaml:"shape,flow"`
}

// Task is one node of the pipeline tree.
type Task struct {
	Name     string   `json:"name"`
	Children []string `json:"children,omitempty"`
	// Parallel names the children that each get every item (parallel branches: a detector and a captioner on the
	// same image), one copy each unless a variant gives the branch a fan-out of its own (Variant.Branches). The
	// other children share the variant's Fanout by its shares, each sub-request going to one of them.
	Parallel []string `json:"parallel,omitempty"`
	// BranchWeights optionally weighs the branches in a request's accuracy, where every child is parallel (one
	// copy each): a weight per child, summing to 1; without, each branch counts by its share of the items, evenly
	// for copies (branchweights.go).
	BranchWeights map[string]float64 `json:"branch_weights,omitempty"`
	// Join makes the task join its parents' outputs for one item before it runs: the one task several tasks may
	// list as a child. Its parents are parallel children of the root and nothing else's; see Join.
	Join     *Join     `json:"join,omitempty"`
	Variants []Variant `json:"variants"`
	// Cascade optionally serves the task by a cascade of its variants (cascade.go).
	Cascade *Cascade `json:"cascade,omitempty"`
}

// Join is how a join task waits for its parents' outputs of one item (Seldon Core 2's inner, any and outer joins).
// The frontend that owns the request keeps the parts (docs/design.md, "Joins").
type Join struct {
	// Mode is "all" (every parent's output; the default), "any" (the first to arrive) or "window" (those that
	// arrive within WindowMs of the first, or all of them if sooner).
	Mode     string  `json:"mode,omitempty"`
	WindowMs float64 `json:"window_ms,omitempty"`
}

// Join modes.
const (
	JoinAll    = "all"
	JoinAny    = "any"
	JoinWindow = "window"
)

// Variant is one model that can perform a task.
type Variant struct {
	Name string `json:"name"`
	// Accuracy is the variant's profiled single-model accuracy, in [0, 1].
	Accuracy float64  `json:"accuracy"`
	Executor Executor `json:"executor"`
	// Fanout is the multiplicative factor: sub-requests emitted per input, and their split across the child tasks
	// not in the task's Parallel. Required when the task has such children, absent otherwise.
	Fanout *Fanout `json:"fanout,omitempty"`
	// Branches optionally gives a parallel child (Task.Parallel) a fan-out of its own: that many sub-requests per
	// item go to it, drawn from the distribution (no shares). A parallel child not listed gets one copy per item.
	Branches map[string]Fanout `json:"branches,omitempty"`
	// Profile has one point per allowed batch size, in increasing batch order: the default class's (classes.go).
	// Optional when ClassProfiles gives others.
	Profile []ProfilePoint `json:"profile,omitempty"`
	// ClassProfiles gives the variant's profile on other server classes, by class; parsing expands the variant into
	// one variant per class ("model@class", classes.go), so a parsed spec has none.
	ClassProfiles map[string][]ProfilePoint `json:"class_profiles,omitempty"`
	// SwapMs is how long a worker takes to load the variant when it is assigned it (0 if not profiled): the
	// emulated executor waits that long before serving, and the simulator keeps the server idle as long.
	SwapMs float64 `json:"swap_ms,omitempty"`
	// Confidence is how the emulated executor draws its confidence in each answer (emulated only; needed by a
	// cascade's first variant).
	Confidence *Confidence `json:"confidence,omitempty"`
}

// Executor says how a variant computes.
type Executor struct {
	// Kind is "emulated" (sleep for the profiled latency, emit the profiled fan-out) or "onnx" (run a model with
	// ONNX Runtime).
	Kind string `json:"kind"`
	// Model is the ONNX file, relative to the models directory (onnx only).
	Model string `json:"model,omitempty"`
	// Program is the code around the model (onnx only): "tensor" (default: each item's one FP32 input is stacked
	// into a batch, each output split back per item; leaf tasks only), "ocr-detect" or "ocr-recognize".
	Program string `json:"program,omitempty"`
	// InputSize is, for ocr-detect, the long side of the detector's square input (default 640); for
	// ocr-recognize, the least width of the recogniser's input (default 320).
	InputSize int `json:"input_size,omitempty"`
	// Threads is the number of intra-op threads of one inference (default 1: workers share the machine's cores).
	Threads int `json:"threads,omitempty"`
}

// Executor kinds and ONNX programs.
const (
	ExecutorEmulated = "emulated"
	ExecutorONNX     = "onnx"

	ProgramTensor       = "tensor"
	ProgramOCRDetect    = "ocr-detect"
	ProgramOCRRecognize = "ocr-recognize"
)

// Fanout describes the sub-requests a variant emits for its child tasks.
type Fanout struct {
	// Mean is the mean number of sub-requests emitted per input item, over all child tasks.
	Mean float64 `json:"mean"`
	// Shares is the share of those sub-requests going to each child task; the shares sum to 1. It may be omitted
	// when the task has exactly one child.
	Shares map[string]float64 `json:"shares,omitempty"`
	// Distribution of the per-item count: "poisson" (default), "fixed" (round(mean) every time) or
	// "negative-binomial" (over-dispersed: variance mean + mean^2/Dispersion; a traffic camera's frames range from
	// empty to crowded, which a Poisson's variance, the mean, is far too small for).
	Distribution string `json:"distribution,omitempty"`
	// Dispersion is the negative binomial's shape, > 0 (negative-binomial only): the smaller, the burstier.
	Dispersion float64 `json:"dispersion,omitempty"`
}

// Fan-out distributions.
const (
	FanoutPoisson          = "poisson"
	FanoutFixed            = "fixed"
	FanoutNegativeBinomial = "negative-binomial"
)

// ProfilePoint is the measured latency of one batch of a given size.
type ProfilePoint struct {
	Batch int     `json:"batch" yaml:"batch"`
	P50Ms float64 `json:"p50_ms" yaml:"p50_ms"`
	P95Ms float64 `json:"p95_ms" yaml:"p95_ms"`
	P99Ms float64 `json:"p99_ms,omitempty" yaml:"p99_ms,omitempty"`
}

// PathAccuracy is the end-to-end accuracy of one root-to-leaf path, written as "task/variant" hops from the root.
type PathAccuracy struct {
	Path     []string `json:"path" yaml:"path,flow"`
	Accuracy float64  `json:"accuracy" yaml:"accuracy"`
}

// Allocation hosts Replicas workers of one variant with a maximum batch size.
type Allocation struct {
	Task     string `json:"task"`
	Variant  string `json:"variant"`
	Replicas int    `json:"replicas"`
	MaxBatch int    `json:"max_batch"`
}
