// Network namespaces: with Config.Netns, every process of a System (each nats-server, the planner, the frontends,
// the workers, loadgen) runs in a network namespace of its own with its own address, joined to the others by a veth
// pair on one bridge, so that the cluster's routes and every client connection cross a real network path rather
// than loopback. Root and iproute2's `ip` are required (NetnsAvailable).

package chaos

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
)

// NetnsAvailable says whether this machine lets the suite make network namespaces: root and `ip`, and why not.
func NetnsAvailable() error {
	if os.Geteuid() != 0 {
		return errors.New("network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("network namespaces need iproute2's ip")
	}
	return nil
}

// netLab is one System's namespaces: a bridge in the host's namespace holding the subnet's first address, and a
// namespace per process. Names start with "slp" and the lab's id: `ip netns list | grep ^slp` shows what a killed
// suite left behind.
type netLab struct {
	id     string // 4 hex digits
	subnet string // "10.213.K", a /24
	bridge string

	mu  sync.Mutex
	nss []string
}

func newNetLab() (*netLab, error) {
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	id := hex.EncodeToString(b[:2])
	l := &netLab{id: id, subnet: fmt.Sprintf("10.213.%d", 1+int(b[2])%250), bridge: "slpbr" + id}
	err := ipRun(
		[]string{"link", "add", l.bridge, "type", "bridge"},
		[]string{"addr", "add", l.subnet + ".1/24", "dev", l.bridge},
		[]string{"link", "set", l.bridge, "up"},
	)
	if err != nil {
		l.close()
		return nil, err
	}
	return l, nil
}

// add makes the namespace of one process and returns its address and the command prefix that runs a program in it.
func (l *netLab) add(name string) (addr string, wrap []string, err error) {
	l.mu.Lock()
	n := len(l.nss) + 2 // .1 is the bridge
	if n > 254 {
		l.mu.Unlock()
		return "", nil, errors.New("more than 253 namespaces")
	}
	ns := fmt.Sprintf("slp%s-%s", l.id, name)
	l.nss = append(l.nss, ns)
	l.mu.Unlock()
	addr = fmt.Sprintf("%s.%d", l.subnet, n)
	host, peer := fmt.Sprintf("slp%sh%d", l.id, n), fmt.Sprintf("slp%sp%d", l.id, n) // at most 15 characters
	in := func(args ...string) []string { return append([]string{"-n", ns}, args...) }
	err = ipRun(
		[]string{"netns", "add", ns},
		[]string{"link", "add", host, "type", "veth", "peer", "name", peer},
		[]string{"link", "set", peer, "netns", ns},
		[]string{"link", "set", host, "master", l.bridge, "up"},
		in("addr", "add", addr+"/24", "dev", peer),
		in("link", "set", peer, "up"),
		in("link", "set", "lo", "up"),
	)
	return addr, []string{"ip", "netns", "exec", ns}, err
}

// close removes the namespaces (their veth pairs go with them) and the bridge.
func (l *netLab) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ns := range l.nss {
		_ = ipRun([]string{"netns", "del", ns})
	}
	l.nss = nil
	_ = ipRun([]string{"link", "del", l.bridge})
}

// ipRun runs `ip` once per argument list, stopping at the first failure.
func ipRun(cmds ...[]string) error {
	for _, args := range cmds {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}
