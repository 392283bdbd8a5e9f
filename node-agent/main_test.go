package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// What the agent writes, in order, for each change of verdict. The server here only
// records requests; what the API server does with them is tested on the real clusters
// (tests/cluster/test_node_agent.py).
func recorder(t *testing.T) (*agent, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	server := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path+" "+string(body))
		mu.Unlock()
		_, _ = w.Write([]byte("{}"))
	}))
	t.Cleanup(server.Close)
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("t"), 0o600); err != nil {
		t.Fatal(err)
	}
	k := &kube{base: server.URL, tokenPath: token, client: server.Client()}
	a := &agent{kube: k, cfg: settings{node: "n1", namespace: "openblox-node", pod: "agent-x"}}
	return a, func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := seen
		seen = nil
		return out
	}
}

func labelled(ready bool, status, reason, message string) *node {
	n := &node{}
	n.Metadata.Labels = map[string]string{}
	if ready {
		n.Metadata.Labels[readyLabel] = "true"
	}
	if status != "" {
		n.Status.Conditions = []condition{{Type: conditionType, Status: status, Reason: reason, Message: message}}
	}
	return n
}

func kinds(requests []string) []string {
	out := []string{}
	for _, r := range requests {
		switch {
		case strings.Contains(r, "/status "):
			out = append(out, "condition")
		case strings.Contains(r, "/events"):
			out = append(out, "event")
		case strings.Contains(r, readyLabel+`":null`):
			out = append(out, "label-off")
		case strings.Contains(r, readyLabel+`":"true"`):
			out = append(out, "label-on")
		default:
			out = append(out, r)
		}
	}
	return out
}

func TestTheLabelNeverPromisesMoreThanTheCondition(t *testing.T) {
	a, requests := recorder(t)
	ctx, now := context.Background(), time.Now()
	ready := verdictOf(nil)
	lacking := verdictOf([]lack{{"RunscNetworkOn", "network is on"}})

	if err := a.publish(ctx, ready, labelled(false, "", "", ""), now); err != nil {
		t.Fatal(err)
	}
	if got := kinds(requests()); strings.Join(got, ",") != "condition,event,label-on" {
		t.Errorf("becoming ready: %v", got)
	}
	if err := a.publish(ctx, lacking, labelled(true, "True", ready.reason, ready.message), now); err != nil {
		t.Fatal(err)
	}
	if got := kinds(requests()); strings.Join(got, ",") != "label-off,condition,event" {
		t.Errorf("losing readiness: %v", got)
	}
	if err := a.publish(ctx, lacking, labelled(false, "False", lacking.reason, lacking.message), now); err != nil {
		t.Fatal(err)
	}
	if got := requests(); len(got) != 0 {
		t.Errorf("an unchanged verdict was written again: %v", got)
	}
	// The operator took the label off (the Lease lapsed) while the agent was stuck; the
	// agent, back, puts it on again.
	if err := a.publish(ctx, ready, labelled(false, "True", ready.reason, ready.message), now); err != nil {
		t.Fatal(err)
	}
	if got := kinds(requests()); strings.Join(got, ",") != "label-on" {
		t.Errorf("label lost while ready: %v", got)
	}
	// A node that could not be read: the label is taken off all the same.
	if err := a.publish(ctx, lacking, nil, now); err != nil {
		t.Fatal(err)
	}
	if got := kinds(requests()); strings.Join(got, ",") != "label-off,condition,event" {
		t.Errorf("node unread: %v", got)
	}
}
