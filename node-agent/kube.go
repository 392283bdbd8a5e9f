package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// The in-cluster API, with the pod's own service account: the few calls the agent makes,
// on net/http (client-go would be most of the binary).
type kube struct {
	base      string
	tokenPath string
	client    *http.Client
}

const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

func inCluster() (*kube, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, fmt.Errorf("not in a pod: KUBERNETES_SERVICE_HOST/PORT are unset")
	}
	ca, err := os.ReadFile(serviceAccountDir + "/ca.crt")
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("no certificate in %s/ca.crt", serviceAccountDir)
	}
	return &kube{
		base:      "https://" + net.JoinHostPort(host, port),
		tokenPath: serviceAccountDir + "/token",
		client: &http.Client{
			Timeout:   10 * time.Second,
			Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
		},
	}, nil
}

// apiError is a response that was not a success.
type apiError struct {
	Status  int
	Message string
}

func (e *apiError) Error() string { return fmt.Sprintf("%d: %s", e.Status, e.Message) }

func isStatus(err error, status int) bool {
	e, ok := err.(*apiError)
	return ok && e.Status == status
}

// do sends body (JSON) and decodes the answer into out (when not nil). The token is read
// on every call: the kubelet rotates it.
func (k *kube) do(ctx context.Context, method, path, contentType string, body, out any) error {
	var reader io.Reader
	if body != nil {
		encoded, err := json.Marshal(body)
		if err != nil {
			return err
		}
		reader = bytes.NewReader(encoded)
	}
	request, err := http.NewRequestWithContext(ctx, method, k.base+path, reader)
	if err != nil {
		return err
	}
	token, err := os.ReadFile(k.tokenPath)
	if err != nil {
		return err
	}
	request.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	request.Header.Set("Accept", "application/json")
	if contentType != "" {
		request.Header.Set("Content-Type", contentType)
	}
	response, err := k.client.Do(request)
	if err != nil {
		return err
	}
	defer response.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(response.Body, 4<<20))
	if err != nil {
		return err
	}
	if response.StatusCode/100 != 2 {
		var status struct{ Message string }
		if json.Unmarshal(answer, &status) != nil || status.Message == "" {
			status.Message = strings.TrimSpace(string(answer))
		}
		return &apiError{response.StatusCode, status.Message}
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(answer, out)
}

const (
	mergePatch     = "application/merge-patch+json"
	strategicPatch = "application/strategic-merge-patch+json"
)

// node is what the agent reads of its Node.
type node struct {
	Metadata struct {
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Status struct {
		RuntimeHandlers []struct {
			Name string `json:"name"`
		} `json:"runtimeHandlers"`
		Conditions []condition `json:"conditions"`
	} `json:"status"`
}

type condition struct {
	Type               string `json:"type"`
	Status             string `json:"status"`
	Reason             string `json:"reason,omitempty"`
	Message            string `json:"message,omitempty"`
	LastHeartbeatTime  string `json:"lastHeartbeatTime,omitempty"`
	LastTransitionTime string `json:"lastTransitionTime,omitempty"`
}

func (n *node) handlers() []string {
	names := []string{}
	for _, h := range n.Status.RuntimeHandlers {
		names = append(names, h.Name)
	}
	return names
}

func (n *node) condition(kind string) *condition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == kind {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func (k *kube) node(ctx context.Context, name string) (*node, error) {
	var found node
	err := k.do(ctx, http.MethodGet, "/api/v1/nodes/"+name, "", nil, &found)
	return &found, err
}

// setLabel sets the node's label to value, or removes it when value is "".
func (k *kube) setLabel(ctx context.Context, name, label, value string) error {
	var wanted any
	if value != "" {
		wanted = value
	}
	patch := map[string]any{"metadata": map[string]any{"labels": map[string]any{label: wanted}}}
	return k.do(ctx, http.MethodPatch, "/api/v1/nodes/"+name, mergePatch, patch, nil)
}

// setCondition merges one condition into the node's status (by its type).
func (k *kube) setCondition(ctx context.Context, name string, c condition) error {
	patch := map[string]any{"status": map[string]any{"conditions": []condition{c}}}
	return k.do(ctx, http.MethodPatch, "/api/v1/nodes/"+name+"/status", strategicPatch, patch, nil)
}

// lease is a coordination.k8s.io/v1 Lease.
type lease struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   map[string]any `json:"metadata"`
	Spec       map[string]any `json:"spec"`
}

// renewLease says the agent on this node is alive: the Lease named after the node, held
// by the agent's pod, renewed now. The operator reads it: a node whose Lease is not
// renewed loses its readiness label even when the agent cannot say so itself.
func (k *kube) renewLease(ctx context.Context, namespace, name, holder string, seconds int, now time.Time) error {
	path := "/apis/coordination.k8s.io/v1/namespaces/" + namespace + "/leases"
	spec := map[string]any{
		"holderIdentity":       holder,
		"leaseDurationSeconds": seconds,
		"renewTime":            now.UTC().Format("2006-01-02T15:04:05.000000Z07:00"),
	}
	var found lease
	err := k.do(ctx, http.MethodGet, path+"/"+name, "", nil, &found)
	if isStatus(err, http.StatusNotFound) {
		made := lease{"coordination.k8s.io/v1", "Lease", map[string]any{"name": name}, spec}
		return k.do(ctx, http.MethodPost, path, "application/json", made, nil)
	}
	if err != nil {
		return err
	}
	for key, value := range spec {
		if found.Spec == nil {
			found.Spec = map[string]any{}
		}
		found.Spec[key] = value
	}
	// The resourceVersion read is sent back: a write that raced another fails (409)
	// instead of overwriting it, and the next round renews it.
	return k.do(ctx, http.MethodPut, path+"/"+name, "application/json", found, nil)
}

// Events about a cluster-scoped object live in "default" (the API server refuses any
// other namespace for them), as the kubelet's Node Events do.
const nodeEventNamespace = "default"

// event records what the agent did or found, on the Node. Its uid is the Node's name, as
// the kubelet's are: that is what `kubectl describe node` looks for.
func (k *kube) event(ctx context.Context, nodeName, kind, reason, message string, now time.Time) error {
	namespace := nodeEventNamespace
	stamp := now.UTC().Format(time.RFC3339)
	body := map[string]any{
		"apiVersion": "v1",
		"kind":       "Event",
		"metadata":   map[string]any{"generateName": nodeName + "-", "namespace": namespace},
		"involvedObject": map[string]any{
			"apiVersion": "v1", "kind": "Node", "name": nodeName, "uid": nodeName,
		},
		"type": kind, "reason": reason, "message": message,
		"firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
		"source": map[string]any{"component": "openblox-node-agent", "host": nodeName},
	}
	return k.do(ctx, http.MethodPost, "/api/v1/namespaces/"+namespace+"/events", "application/json", body, nil)
}
