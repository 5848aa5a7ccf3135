package integration

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"

	"github.com/sluicehq/sluice/flows/spec"
	"github.com/sluicehq/sluice/metrics"
)

// TestDeployExamples checks the deployment examples against the binary:
// the Kubernetes manifests parse, probe the paths on the port sluice
// serves them on, and carry a valid spec; the dashboard queries only
// metrics sluice serves; the Dockerfile and systemd unit use flags the
// binary has.
func TestDeployExamples(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../deploy/kubernetes/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	type probe struct {
		HTTPGet struct {
			Path string `yaml:"path"`
			Port string `yaml:"port"`
		} `yaml:"httpGet"`
	}
	var specText string
	var dep struct {
		Kind string `yaml:"kind"`
		Spec struct {
			Template struct {
				Metadata struct {
					Annotations map[string]string `yaml:"annotations"`
				} `yaml:"metadata"`
				Spec struct {
					Containers []struct {
						Args  []string `yaml:"args"`
						Ports []struct {
							Name          string `yaml:"name"`
							ContainerPort int    `yaml:"containerPort"`
						} `yaml:"ports"`
						Env []struct {
							Name string `yaml:"name"`
						} `yaml:"env"`
						Liveness  probe `yaml:"livenessProbe"`
						Readiness probe `yaml:"readinessProbe"`
					} `yaml:"containers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	found := 0
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		var head struct {
			Kind string            `yaml:"kind"`
			Data map[string]string `yaml:"data"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("manifest does not parse: %v\n%s", err, doc)
		}
		switch head.Kind {
		case "ConfigMap":
			specText = head.Data["sluice.yaml"]
			found++
		case "Deployment":
			if err := yaml.Unmarshal([]byte(doc), &dep); err != nil {
				t.Fatal(err)
			}
			found++
		case "Secret":
			found++
		}
	}
	if found != 3 {
		t.Fatalf("%d of the ConfigMap, Secret and Deployment found", found)
	}
	p, err := spec.Parse([]byte(specText), "sluice.yaml", func(name string) (string, bool) { return "x", name == "CLICKHOUSE_PASSWORD" })
	if err != nil {
		t.Fatalf("the ConfigMap's spec: %v", err)
	}
	if p.Metrics == nil || p.Metrics.Listen != ":9090" {
		t.Fatalf("the spec serves metrics on %+v, want :9090", p.Metrics)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	if len(c.Ports) != 1 || c.Ports[0].ContainerPort != 9090 || c.Liveness.HTTPGet.Port != c.Ports[0].Name || c.Readiness.HTTPGet.Port != c.Ports[0].Name {
		t.Errorf("ports %+v, probes on %q and %q", c.Ports, c.Liveness.HTTPGet.Port, c.Readiness.HTTPGet.Port)
	}
	if c.Liveness.HTTPGet.Path != "/healthz" || c.Readiness.HTTPGet.Path != "/readyz" {
		t.Errorf("probes on %q and %q, want /healthz and /readyz", c.Liveness.HTTPGet.Path, c.Readiness.HTTPGet.Path)
	}
	if a := dep.Spec.Template.Metadata.Annotations; a["prometheus.io/port"] != "9090" || a["prometheus.io/path"] != "/metrics" {
		t.Errorf("scrape annotations %v", a)
	}
	if len(c.Env) != 1 || c.Env[0].Name != "CLICKHOUSE_PASSWORD" {
		t.Errorf("env %+v, want the password from the secret", c.Env)
	}

	served, err := metrics.New().Names()
	if err != nil {
		t.Fatal(err)
	}
	dash, err := os.ReadFile("../deploy/grafana/sluice-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var board struct {
		Panels []struct {
			Targets []struct{ Expr string } `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(dash, &board); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	used := map[string]bool{}
	for _, pn := range board.Panels {
		for _, tg := range pn.Targets {
			for _, m := range regexp.MustCompile(`\b(sluice|go|process)_[a-z_]+`).FindAllString(tg.Expr, -1) {
				used[strings.TrimSuffix(m, "_bucket")] = true
			}
		}
	}
	for m := range used {
		if !slices.Contains(served, m) {
			t.Errorf("the dashboard queries %s, which sluice does not serve", m)
		}
	}
	for _, m := range served {
		if strings.HasPrefix(m, "sluice_") && !used[m] {
			t.Errorf("the dashboard shows no panel of %s", m)
		}
	}

	help := mustSluice(t, "run", "--help").stdout
	for _, file := range []string{"../Dockerfile", "../deploy/systemd/sluice.service"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(line, "CMD ") && !strings.HasPrefix(line, "ENTRYPOINT ") && !strings.HasPrefix(line, "ExecStart=") {
				continue // not sluice's command line
			}
			for _, flag := range regexp.MustCompile(`--[a-z-]+`).FindAllString(line, -1) {
				if !strings.Contains(help, flag+" ") {
					t.Errorf("%s runs sluice with %s, which sluice run does not take", file, flag)
				}
			}
		}
	}
}
