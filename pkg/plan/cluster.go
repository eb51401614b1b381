package plan

import (
	"fmt"
	"iter"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// ServerClass is one kind of server in a cluster: its name (wire.DefaultClass for servers that declare none), how
// many there are and what one costs per hour (any currency; 0 when no price is known).
type ServerClass struct {
	Name         string  `json:"name"`
	Servers      int     `json:"servers"`
	PricePerHour float64 `json:"price_per_hour,omitempty"`
}

// Cluster is the servers a plan may use, one entry per class in name order (NewCluster keeps it so).
type Cluster []ServerClass

// Uniform is a cluster of n servers of the default class, as a cluster of one kind is.
func Uniform(n int) Cluster {
	return Cluster{{Name: wire.DefaultClass, Servers: n}}
}

// NewCluster is the cluster of the given servers per class, priced by prices (a class without a price costs 0).
// Classes with no servers are kept out.
func NewCluster(servers map[string]int, prices Prices) Cluster {
	var c Cluster
	for name, n := range servers {
		if n > 0 {
			c = append(c, ServerClass{Name: name, Servers: n, PricePerHour: prices[name]})
		}
	}
	sort.Slice(c, func(i, j int) bool { return c[i].Name < c[j].Name })
	return c
}

// Total is the number of servers over every class.
func (c Cluster) Total() int {
	n := 0
	for _, sc := range c {
		n += sc.Servers
	}
	return n
}

// Servers is how many servers class has (0 for a class the cluster does not have).
func (c Cluster) Servers(class string) int {
	if sc := c.class(class); sc != nil {
		return sc.Servers
	}
	return 0
}

// Price is the hourly price of one server of class (0 when unknown).
func (c Cluster) Price(class string) float64 {
	if sc := c.class(class); sc != nil {
		return sc.PricePerHour
	}
	return 0
}

func (c Cluster) class(name string) *ServerClass {
	if name == "" {
		name = wire.DefaultClass
	}
	for i := range c {
		if c[i].Name == name {
			return &c[i]
		}
	}
	return nil
}

// Classless says every server is of the default class: a cluster of one kind, as before classes.
func (c Cluster) Classless() bool {
	for _, sc := range c {
		if sc.Name != wire.DefaultClass && sc.Servers > 0 {
			return false
		}
	}
	return true
}

// Counts are the servers per class (classes without servers left out).
func (c Cluster) Counts() map[string]int {
	out := make(map[string]int, len(c))
	for _, sc := range c {
		if sc.Servers > 0 {
			out[sc.Name] += sc.Servers
		}
	}
	return out
}

// Classes are the classes' names, in order.
func (c Cluster) Classes() []string {
	out := make([]string, len(c))
	for i, sc := range c {
		out[i] = sc.Name
	}
	return out
}

// Priced says some class has a price: plans then report their cost.
func (c Cluster) Priced() bool {
	for _, sc := range c {
		if sc.PricePerHour > 0 {
			return true
		}
	}
	return false
}

// Cost is the hourly price of the servers used, per class.
func (c Cluster) Cost(used map[string]int) float64 {
	cost := 0.0
	for class, n := range used {
		cost += float64(n) * c.Price(class)
	}
	return cost
}

// String spells the cluster as --servers takes it: "cpu=16,fast=4", or "20" for servers of the default class only.
func (c Cluster) String() string {
	if len(c) == 1 && c[0].Name == wire.DefaultClass {
		return strconv.Itoa(c[0].Servers)
	}
	parts := make([]string, len(c))
	for i, sc := range c {
		parts[i] = sc.Name + "=" + strconv.Itoa(sc.Servers)
	}
	return strings.Join(parts, ",")
}

// WithPrices is the cluster with each class priced by prices (classes prices does not name keep theirs).
func (c Cluster) WithPrices(prices Prices) Cluster {
	out := append(Cluster(nil), c...)
	for i := range out {
		if p, ok := prices[out[i].Name]; ok {
			out[i].PricePerHour = p
		}
	}
	return out
}

// ParseServers reads a cluster's servers as flags give them: "N" (N servers of the default class) or
// "CLASS=N,CLASS=N,...". Each class at most once, each count >= 0; the total must be positive.
func ParseServers(s string) (map[string]int, error) {
	s = strings.TrimSpace(s)
	if n, err := strconv.Atoi(s); err == nil {
		if n <= 0 {
			return nil, fmt.Errorf("servers %q: want a positive count", s)
		}
		return map[string]int{wire.DefaultClass: n}, nil
	}
	out := map[string]int{}
	total := 0
	err := parseClassList(s, "servers", func(class, value string) error {
		n, err := strconv.Atoi(value)
		if err != nil || n < 0 {
			return fmt.Errorf("servers of class %s: %q is not a count >= 0", class, value)
		}
		out[class] = n
		total += n
		return nil
	})
	if err != nil {
		return nil, err
	}
	if total == 0 {
		return nil, fmt.Errorf("servers %q: no servers in any class", s)
	}
	return out, nil
}

// Prices are the hourly prices of one server per class.
type Prices map[string]float64

// ParsePrices reads "CLASS=PRICE,..." (each price a finite number >= 0, per hour); "" is no prices.
func ParsePrices(s string) (Prices, error) {
	out := Prices{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	err := parseClassList(s, "price", func(class, value string) error {
		p, err := strconv.ParseFloat(value, 64)
		if err != nil || p < 0 || math.IsInf(p, 0) || math.IsNaN(p) {
			return fmt.Errorf("price of class %s: %q is not a price per hour >= 0", class, value)
		}
		out[class] = p
		return nil
	})
	return out, err
}

// parseClassList reads "CLASS=VALUE,..." into set, each class a valid name, once.
func parseClassList(s, what string, set func(class, value string) error) error {
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		class, value, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || !wire.ValidName(class) {
			return fmt.Errorf("%s %q: want CLASS=VALUE,... with class names of [A-Za-z0-9_-]", what, s)
		}
		if seen[class] {
			return fmt.Errorf("%s %q: class %s given twice", what, s, class)
		}
		seen[class] = true
		if err := set(class, value); err != nil {
			return err
		}
	}
	return nil
}

// SpareOfAll is how many of the servers the plans of every pipeline on one cluster were made for no plan uses: the
// sum of each plan's Allocation.ClusterServers (its share of the workers when they are divided) less its replicas.
// A tuner lends any of them to any pipeline, so a pipeline reaches its own replicas and these without a new plan
// (Reach; admission's ceiling), not the servers the other pipelines' plans use.
func SpareOfAll(plans iter.Seq[*Plan]) int {
	n := 0
	for p := range plans {
		if p != nil && p.Allocation != nil {
			n += max(p.Allocation.ClusterServers-p.Servers(), 0)
		}
	}
	return n
}

// Reach is how many servers p's variants may run on without a new plan, spare being SpareOfAll of the plans in
// force (p's among them): its replicas and the servers no plan uses, which the tuner lends.
func (p *Plan) Reach(spare int) int { return p.Servers() + spare }
