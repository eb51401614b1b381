package up

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sleipnir-serving/sleipnir/internal/readme"
	"github.com/sleipnir-serving/sleipnir/pkg/auth"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// TestReadmeRequests sends the README's requests, its curl and nats commands as they are written, to the system
// `make run` runs (the traffic example on 20 workers, here with its static allocation): each must reach an endpoint
// or subject the system serves and be answered as a served request, not refused.
func TestReadmeRequests(t *testing.T) {
	cmds := readme.Load(t)
	curls, natsReqs := readme.Of(cmds, "curl"), readme.Of(cmds, "bin/nats")
	if len(curls) == 0 || len(natsReqs) == 0 {
		t.Fatalf("the README shows %d curl and %d nats commands; want a request by hand of each", len(curls), len(natsReqs))
	}
	sys, _ := startSystem(t, "../../examples/traffic.yaml", 20)
	srv := httptest.NewServer(sys.Frontend.Handler())
	defer srv.Close()
	for _, c := range curls {
		req, err := curlRequest(c, srv.URL)
		if err != nil {
			t.Errorf("%q: %v", c.Line, err)
			continue
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%q: %v", c.Line, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !servedHTTP(resp.StatusCode, body) {
			t.Errorf("%q: %d %s", c.Line, resp.StatusCode, body)
		}
		t.Logf("%q: %d %s", c.Line, resp.StatusCode, replyStatus(body))
	}
	nc, err := sys.Connect("readme")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range natsReqs {
		msg, inbox, err := natsRequest(c)
		if err != nil {
			t.Errorf("%q: %v", c.Line, err)
			continue
		}
		if want := (auth.User{Role: auth.Client}).Inbox(); inbox != want {
			t.Errorf("%q: inbox prefix %q, want the client user's %q", c.Line, inbox, want)
		}
		rep, err := nc.RequestMsg(msg, 10*time.Second)
		if err != nil {
			t.Errorf("%q: %v", c.Line, err)
			continue
		}
		status := replyStatus(rep.Data)
		if !served(status) {
			t.Errorf("%q: reply %s", c.Line, rep.Data)
		}
		t.Logf("%q: %s", c.Line, status)
	}
}

// served: the request was taken and executed, in time or not (a busy machine may make it late or drop leaves).
func served(status string) bool {
	return status == wire.StatusOK || status == wire.StatusPartial || status == wire.StatusLate ||
		status == wire.StatusDropped
}

func servedHTTP(code int, body []byte) bool {
	if code == http.StatusOK {
		return true
	}
	return (code == http.StatusServiceUnavailable || code == http.StatusGatewayTimeout) && served(replyStatus(body))
}

func replyStatus(body []byte) string {
	var rep struct{ Status string }
	_ = json.Unmarshal(body, &rep)
	return rep.Status
}

// curlRequest is the HTTP request a README curl command sends, to base instead of its host.
func curlRequest(c readme.Command, base string) (*http.Request, error) {
	method, target, body := http.MethodGet, "", ""
	header := http.Header{}
	for i := 1; i < len(c.Args); i++ {
		a := c.Args[i]
		switch a {
		case "-s":
		case "-o", "-w", "-H", "-d", "--data", "--data-binary", "-X":
			if i+1 == len(c.Args) {
				return nil, fmt.Errorf("%s without its value", a)
			}
			i++
			v := c.Args[i]
			switch a {
			case "-H":
				k, hv, ok := strings.Cut(v, ":")
				if !ok {
					return nil, fmt.Errorf("header %q", v)
				}
				header.Add(k, strings.TrimSpace(hv))
			case "-d", "--data", "--data-binary":
				if strings.HasPrefix(v, "@") {
					return nil, fmt.Errorf("a body from a file (%s): the README's requests carry theirs", v)
				}
				method, body = http.MethodPost, v
			case "-X":
				method = v
			}
		default:
			if strings.HasPrefix(a, "-") || target != "" {
				return nil, fmt.Errorf("%q: not a curl argument the test knows", a)
			}
			target = a
		}
	}
	u, err := url.Parse("http://" + strings.TrimPrefix(target, "http://"))
	if err != nil || u.Host != "localhost:8080" {
		return nil, fmt.Errorf("%q: not a URL of make run's frontend, localhost:8080 (%v)", target, err)
	}
	req, err := http.NewRequest(method, base+u.RequestURI(), strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header = header
	return req, nil
}

// natsRequest is the message a README nats command (`nats [--inbox-prefix P] req SUBJECT BODY [-H K:V]...`) sends,
// and its inbox prefix.
func natsRequest(c readme.Command) (*nats.Msg, string, error) {
	var inbox string
	var positional []string
	header := nats.Header{}
	for i := 1; i < len(c.Args); i++ {
		switch a := c.Args[i]; {
		case a == "--inbox-prefix" || a == "-H":
			if i+1 == len(c.Args) {
				return nil, "", fmt.Errorf("%s without its value", a)
			}
			i++
			if a == "-H" {
				k, v, ok := strings.Cut(c.Args[i], ":")
				if !ok {
					return nil, "", fmt.Errorf("header %q", c.Args[i])
				}
				header.Add(k, v)
			} else {
				inbox = c.Args[i]
			}
		case strings.HasPrefix(a, "-"):
			return nil, "", fmt.Errorf("%q: not a nats flag the test knows", a)
		default:
			positional = append(positional, a)
		}
	}
	if len(positional) != 3 || (positional[0] != "req" && positional[0] != "request") {
		return nil, "", fmt.Errorf("want req SUBJECT BODY, got %q", positional)
	}
	msg := nats.NewMsg(positional[1])
	msg.Header, msg.Data = header, []byte(positional[2])
	return msg, inbox, nil
}
