// Package validate checks the deployment files of deploy/ and the root
// docker-compose.yml without Docker or a Kubernetes cluster: the compose file
// is loaded by compose-go (the loader behind "docker compose config"), the
// Kubernetes manifests are decoded strictly into k8s.io/api types, the Vault
// policy is parsed as HCL, and the collector and Prometheus configurations as
// YAML with their cross-references checked. It is a separate Go module so
// the main module does not depend on k8s.io/api.
package validate

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/hashicorp/hcl"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// root is the repository root, two levels up.
var root = filepath.Join("..", "..")

func read(t *testing.T, rel string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, rel))
	require.NoError(t, err)
	return data
}

// loadCompose loads docker-compose.yml like "docker compose config", with
// env as the only environment (no .env file, nothing of the test's own).
func loadCompose(t *testing.T, env ...string) (wd string, p *types.Project) {
	t.Helper()
	wd, err := filepath.Abs(root)
	require.NoError(t, err)
	opts, err := cli.NewProjectOptions([]string{filepath.Join(wd, "docker-compose.yml")},
		cli.WithWorkingDirectory(wd), cli.WithInterpolation(true), cli.WithResolvedPaths(true), cli.WithEnv(env))
	require.NoError(t, err)
	p, err = opts.LoadProject(context.Background())
	require.NoError(t, err, "the compose file must load like docker compose config")
	return wd, p
}

// natsUsers returns the user and password of every server of a
// CAPSTAN_NATS_URL, and requires the three nodes in order.
func natsUsers(t *testing.T, natsURL string) (user, password string) {
	t.Helper()
	parts := strings.Split(natsURL, ",")
	require.Len(t, parts, 3, natsURL)
	for i, part := range parts {
		u, err := url.Parse(part)
		require.NoError(t, err)
		require.Equal(t, "nats", u.Scheme)
		require.Equal(t, fmt.Sprintf("nats-%d:4222", i+1), u.Host)
		require.NotNil(t, u.User, "every server of %s carries the user", natsURL)
		pw, ok := u.User.Password()
		require.True(t, ok)
		if i == 0 {
			user, password = u.User.Username(), pw
		}
		require.Equal(t, user, u.User.Username())
		require.Equal(t, password, pw)
	}
	return user, password
}

func TestComposeFile(t *testing.T) {
	t.Parallel()
	wd, p := loadCompose(t)

	require.ElementsMatch(t, []string{"nats-1", "nats-2", "nats-3", "vault", "vault-setup", "otel-collector", "jaeger",
		"prometheus", "personalities", "worker-1", "worker-2", "dispatcher"}, p.ServiceNames())

	for _, name := range []string{"nats-1", "nats-2", "nats-3"} {
		s := p.Services[name]
		require.Equal(t, []string{"--config", "/etc/nats/nats.conf"}, []string(s.Command))
		require.Len(t, s.Volumes, 3)
		require.Equal(t, filepath.Join(wd, "deploy", "nats", name+".conf"), s.Volumes[0].Source)
		require.Equal(t, filepath.Join(wd, "deploy", "nats", "auth.conf"), s.Volumes[1].Source)
		require.Equal(t, "/etc/nats/auth.conf", s.Volumes[1].Target, "next to nats.conf, which includes ./auth.conf")
		for _, v := range s.Volumes[:2] {
			_, err := os.Stat(v.Source)
			require.NoError(t, err)
		}
		require.Contains(t, string(read(t, filepath.Join("deploy", "nats", name+".conf"))), "\ninclude ./auth.conf\n")
		require.NotNil(t, s.HealthCheck, "the personalities job waits for a healthy cluster")
		require.Contains(t, strings.Join(s.HealthCheck.Test, " "), "http://127.0.0.1:8222/healthz")
		// Every password auth.conf reads is in the node's environment (a
		// server without one does not start) ...
		vars := regexp.MustCompile(`\$(CAPSTAN_NATS_[A-Z_]+_PASSWORD)`).FindAllStringSubmatch(string(read(t, filepath.Join("deploy", "nats", "auth.conf"))), -1)
		require.Len(t, vars, 6, "the users of auth.conf")
		for _, v := range vars {
			require.Contains(t, s.Environment, v[1], "%s of %s", v[1], name)
		}
		// ... with its dev default, for local use only.
		require.Equal(t, "worker-dev-only", *s.Environment["CAPSTAN_NATS_WORKER_PASSWORD"])
		require.Equal(t, "operator-dev-only", *s.Environment["CAPSTAN_NATS_OPERATOR_PASSWORD"])
		require.Equal(t, "backend-dev-only", *s.Environment["CAPSTAN_NATS_BACKEND_PASSWORD"])
		require.Equal(t, "approver-dev-only", *s.Environment["CAPSTAN_NATS_APPROVER_PASSWORD"])
		require.Equal(t, "researcher-dev-only", *s.Environment["CAPSTAN_NATS_TENANT_RESEARCHER_PASSWORD"])
		require.Equal(t, "support-dev-only", *s.Environment["CAPSTAN_NATS_TENANT_SUPPORT_PASSWORD"])
	}
	nats := p.Services["nats-1"].Environment
	for _, name := range []string{"worker-1", "worker-2"} {
		s := p.Services[name]
		env := s.Environment
		require.Equal(t, name, *env["CAPSTAN_WORKER_ID"])
		user, pw := natsUsers(t, *env["CAPSTAN_NATS_URL"])
		require.Equal(t, "worker", user)
		require.Equal(t, *nats["CAPSTAN_NATS_WORKER_PASSWORD"], pw)
		require.NotContains(t, env, "CAPSTAN_PERSONALITIES_DIR", "the worker user may not write personalities")
		require.Equal(t, "service_completed_successfully", s.DependsOn["personalities"].Condition)
		require.Equal(t, "3", *env["CAPSTAN_STREAM_REPLICAS"])
		require.Equal(t, "vault", *env["CAPSTAN_SECRETS_BACKEND"])
		for _, v := range []string{"VAULT_ADDR", "VAULT_ROLE_ID", "VAULT_SECRET_ID", "OTEL_EXPORTER_OTLP_ENDPOINT", "CAPSTAN_HTTP_ADDR"} {
			require.NotNil(t, env[v], "%s of %s", v, name)
		}
		require.True(t, s.ReadOnly, "read-only root file system")
		require.Equal(t, "service_completed_successfully", s.DependsOn["vault-setup"].Condition)
	}
	dispatcher := p.Services["dispatcher"]
	require.Equal(t, []string{"batch", "/opt/capstan/examples/calls.jsonl"}, []string(dispatcher.Command))
	_, err := os.Stat(filepath.Join(wd, "examples", "calls.jsonl"))
	require.NoError(t, err)
	user, pw := natsUsers(t, *dispatcher.Environment["CAPSTAN_NATS_URL"])
	require.Equal(t, "backend", user)
	require.Equal(t, *nats["CAPSTAN_NATS_BACKEND_PASSWORD"], pw)

	// The personalities job: the operator stores examples/personalities
	// once the cluster is healthy, before any worker starts.
	job := p.Services["personalities"]
	require.Equal(t, []string{"/usr/local/bin/dispatcher"}, []string(job.Entrypoint))
	require.Equal(t, []string{"personality", "put", "/opt/capstan/examples/personalities"}, []string(job.Command))
	require.Equal(t, "capstan:dev", job.Image)
	require.True(t, job.ReadOnly)
	user, pw = natsUsers(t, *job.Environment["CAPSTAN_NATS_URL"])
	require.Equal(t, "operator", user)
	require.Equal(t, *nats["CAPSTAN_NATS_OPERATOR_PASSWORD"], pw)
	require.Equal(t, "3", *job.Environment["CAPSTAN_STREAM_REPLICAS"], "the first to connect creates the topology")
	for _, name := range []string{"nats-1", "nats-2", "nats-3"} {
		require.Equal(t, "service_healthy", job.DependsOn[name].Condition)
	}
	files, err := filepath.Glob(filepath.Join(wd, "examples", "personalities", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	setup := p.Services["vault-setup"]
	require.Equal(t, *setup.Environment["CAPSTAN_VAULT_ROLE_ID"], *p.Services["worker-1"].Environment["VAULT_ROLE_ID"])
	require.Equal(t, *setup.Environment["CAPSTAN_VAULT_SECRET_ID"], *p.Services["worker-1"].Environment["VAULT_SECRET_ID"])
	require.Equal(t, *setup.Environment["VAULT_TOKEN"], *p.Services["vault"].Environment["VAULT_DEV_ROOT_TOKEN_ID"])
}

// TestComposeNATSPasswordsFromTheEnvironment: each password is one
// variable, read by the NATS servers and put into the URL of every client
// of that user, so setting it (shell or .env) changes all of them.
func TestComposeNATSPasswordsFromTheEnvironment(t *testing.T) {
	t.Parallel()
	_, p := loadCompose(t, "CAPSTAN_NATS_WORKER_PASSWORD=w0rker", "CAPSTAN_NATS_OPERATOR_PASSWORD=0perator", "CAPSTAN_NATS_BACKEND_PASSWORD=backend0",
		"CAPSTAN_NATS_APPROVER_PASSWORD=approver0",
		"CAPSTAN_NATS_TENANT_RESEARCHER_PASSWORD=research0", "CAPSTAN_NATS_TENANT_SUPPORT_PASSWORD=support0")
	for _, name := range []string{"nats-1", "nats-2", "nats-3"} {
		env := p.Services[name].Environment
		require.Equal(t, "w0rker", *env["CAPSTAN_NATS_WORKER_PASSWORD"])
		require.Equal(t, "0perator", *env["CAPSTAN_NATS_OPERATOR_PASSWORD"])
		require.Equal(t, "backend0", *env["CAPSTAN_NATS_BACKEND_PASSWORD"])
		require.Equal(t, "approver0", *env["CAPSTAN_NATS_APPROVER_PASSWORD"])
		require.Equal(t, "research0", *env["CAPSTAN_NATS_TENANT_RESEARCHER_PASSWORD"])
		require.Equal(t, "support0", *env["CAPSTAN_NATS_TENANT_SUPPORT_PASSWORD"])
	}
	for service, want := range map[string]string{"worker-1": "w0rker", "worker-2": "w0rker", "personalities": "0perator", "dispatcher": "backend0"} {
		_, pw := natsUsers(t, *p.Services[service].Environment["CAPSTAN_NATS_URL"])
		require.Equal(t, want, pw, service)
	}
	for _, s := range p.Services {
		for k, v := range s.Environment {
			if v != nil {
				require.NotContains(t, *v, "dev-only", "%s of %s still has a default password", k, s.Name)
			}
		}
	}
}

func TestVaultPolicyAndSetup(t *testing.T) {
	t.Parallel()
	var policy struct {
		Path map[string]struct {
			Capabilities []string `hcl:"capabilities"`
		} `hcl:"path"`
	}
	require.NoError(t, hcl.Unmarshal(read(t, "deploy/vault/capstan-worker.hcl"), &policy))
	require.Equal(t, []string{"read"}, policy.Path["secret/data/capstan/*"].Capabilities, "workers only read their KV v2 prefix")
	for p, rule := range policy.Path {
		require.NotContains(t, rule.Capabilities, "sudo", p)
		require.NotContains(t, rule.Capabilities, "delete", p)
	}
	setup := string(read(t, "deploy/vault/setup.sh"))
	for _, want := range []string{"vault auth enable approle", "vault policy write capstan-worker /deploy/vault/capstan-worker.hcl",
		"auth/approle/role/capstan-worker", "vault kv put secret/capstan/"} {
		require.Contains(t, setup, want)
	}
}

func TestCollectorConfig(t *testing.T) {
	t.Parallel()
	var cfg struct {
		Receivers  map[string]any `json:"receivers"`
		Processors map[string]any `json:"processors"`
		Exporters  map[string]any `json:"exporters"`
		Service    struct {
			Pipelines map[string]struct {
				Receivers  []string `json:"receivers"`
				Processors []string `json:"processors"`
				Exporters  []string `json:"exporters"`
			} `json:"pipelines"`
		} `json:"service"`
	}
	require.NoError(t, yaml.UnmarshalStrict(read(t, "deploy/otel/collector.yaml"), &cfg))
	require.Contains(t, cfg.Service.Pipelines, "traces")
	require.Contains(t, cfg.Service.Pipelines, "metrics")
	for name, p := range cfg.Service.Pipelines {
		for _, r := range p.Receivers {
			require.Contains(t, cfg.Receivers, r, "pipeline %s", name)
		}
		for _, pr := range p.Processors {
			require.Contains(t, cfg.Processors, pr, "pipeline %s", name)
		}
		for _, e := range p.Exporters {
			require.Contains(t, cfg.Exporters, e, "pipeline %s", name)
		}
	}
	require.Contains(t, cfg.Service.Pipelines["traces"].Exporters, "otlp/jaeger")
}

func TestPrometheusConfig(t *testing.T) {
	t.Parallel()
	var cfg struct {
		Global        map[string]string `json:"global"`
		ScrapeConfigs []struct {
			JobName       string `json:"job_name"`
			MetricsPath   string `json:"metrics_path"`
			StaticConfigs []struct {
				Targets []string `json:"targets"`
			} `json:"static_configs"`
		} `json:"scrape_configs"`
	}
	require.NoError(t, yaml.UnmarshalStrict(read(t, "deploy/prometheus/prometheus.yml"), &cfg))
	var targets []string
	for _, sc := range cfg.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			targets = append(targets, st.Targets...)
		}
	}
	require.Subset(t, targets, []string{"worker-1:9464", "worker-2:9464", "otel-collector:8889"})
}

func envOf(c corev1.Container) map[string]corev1.EnvVar {
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	return env
}

// requireNATSUserFromSecret requires the container to connect as user, its
// password from key "password" of the Secret, expanded into CAPSTAN_NATS_URL
// from a variable defined before it (Kubernetes expands $(VAR) only then).
func requireNATSUserFromSecret(t *testing.T, c corev1.Container, user, secret string) {
	t.Helper()
	pwVar := "CAPSTAN_NATS_" + strings.ToUpper(user) + "_PASSWORD"
	pwAt, urlAt := -1, -1
	for i, e := range c.Env {
		switch e.Name {
		case pwVar:
			pwAt = i
			require.Empty(t, e.Value, "never a literal password")
			require.Equal(t, secret, e.ValueFrom.SecretKeyRef.Name)
			require.Equal(t, "password", e.ValueFrom.SecretKeyRef.Key)
		case "CAPSTAN_NATS_URL":
			urlAt = i
			require.Equal(t, "nats://"+user+":$("+pwVar+")@nats.nats.svc.cluster.local:4222", e.Value)
		}
	}
	require.GreaterOrEqual(t, pwAt, 0, "%s is set", pwVar)
	require.Greater(t, urlAt, pwAt, "%s comes before CAPSTAN_NATS_URL", pwVar)
}

// splitDocs splits a multi-document YAML file.
func splitDocs(data []byte) [][]byte {
	var out [][]byte
	for doc := range strings.SplitSeq(string(data), "\n---\n") {
		if strings.TrimSpace(doc) != "" {
			out = append(out, []byte(doc))
		}
	}
	return out
}

// decode decodes one manifest strictly into the k8s.io/api type of its kind:
// an unknown or misspelt field is an error.
func decode(t *testing.T, doc []byte) (string, any) {
	t.Helper()
	var tm metav1.TypeMeta
	require.NoError(t, yaml.Unmarshal(doc, &tm))
	var obj any
	switch tm.APIVersion + "/" + tm.Kind {
	case "v1/Namespace":
		obj = &corev1.Namespace{}
	case "v1/ConfigMap":
		obj = &corev1.ConfigMap{}
	case "v1/Service":
		obj = &corev1.Service{}
	case "apps/v1/Deployment":
		obj = &appsv1.Deployment{}
	case "batch/v1/Job":
		obj = &batchv1.Job{}
	case "policy/v1/PodDisruptionBudget":
		obj = &policyv1.PodDisruptionBudget{}
	case "autoscaling/v2/HorizontalPodAutoscaler":
		obj = &autoscalingv2.HorizontalPodAutoscaler{}
	default:
		t.Fatalf("unexpected kind %s/%s", tm.APIVersion, tm.Kind)
	}
	require.NoError(t, yaml.UnmarshalStrict(doc, obj), "%s", tm.Kind)
	return tm.Kind, obj
}

func TestKubernetesManifests(t *testing.T) {
	t.Parallel()
	var kust struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
	}
	require.NoError(t, yaml.UnmarshalStrict(read(t, "deploy/k8s/kustomization.yaml"), &kust))
	objs := map[string][]any{}
	for _, f := range kust.Resources {
		for _, doc := range splitDocs(read(t, filepath.Join("deploy/k8s", f))) {
			kind, obj := decode(t, doc)
			objs[kind] = append(objs[kind], obj)
		}
	}
	for _, kind := range []string{"Namespace", "ConfigMap", "Service", "Deployment", "Job", "PodDisruptionBudget", "HorizontalPodAutoscaler"} {
		require.Len(t, objs[kind], 1, kind)
	}
	d := objs["Deployment"][0].(*appsv1.Deployment)
	pdb := objs["PodDisruptionBudget"][0].(*policyv1.PodDisruptionBudget)
	hpa := objs["HorizontalPodAutoscaler"][0].(*autoscalingv2.HorizontalPodAutoscaler)
	cm := objs["ConfigMap"][0].(*corev1.ConfigMap)
	svc := objs["Service"][0].(*corev1.Service)
	job := objs["Job"][0].(*batchv1.Job)

	// Selectors line up.
	labels := d.Spec.Template.Labels
	for k, v := range d.Spec.Selector.MatchLabels {
		require.Equal(t, v, labels[k])
	}
	for k, v := range pdb.Spec.Selector.MatchLabels {
		require.Equal(t, v, labels[k], "the PDB selects the workers")
	}
	for k, v := range svc.Spec.Selector {
		require.Equal(t, v, labels[k], "the Service selects the workers")
	}
	require.Equal(t, d.Name, hpa.Spec.ScaleTargetRef.Name)
	require.Equal(t, "Deployment", hpa.Spec.ScaleTargetRef.Kind)
	require.Equal(t, "capstan_calls_pending", hpa.Spec.Metrics[0].External.Metric.Name)

	// The container: probes on the health endpoints, non-root, read-only.
	require.Len(t, d.Spec.Template.Spec.Containers, 1)
	c := d.Spec.Template.Spec.Containers[0]
	require.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
	require.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
	require.True(t, *d.Spec.Template.Spec.SecurityContext.RunAsNonRoot)
	require.True(t, *c.SecurityContext.ReadOnlyRootFilesystem)
	require.False(t, *c.SecurityContext.AllowPrivilegeEscalation)
	require.Equal(t, []corev1.Capability{"ALL"}, c.SecurityContext.Capabilities.Drop)
	env := envOf(c)
	require.Equal(t, "0.0.0.0:9464", env["CAPSTAN_HTTP_ADDR"].Value)
	require.NotContains(t, env, "CAPSTAN_PERSONALITIES_DIR", "the worker user may not write personalities")
	require.Equal(t, "capstan-vault-approle", env["VAULT_SECRET_ID"].ValueFrom.SecretKeyRef.Name, "credentials come from a Secret")
	requireNATSUserFromSecret(t, c, "worker", "capstan-nats-worker")
	for _, v := range d.Spec.Template.Spec.Volumes {
		require.Nil(t, v.ConfigMap, "the workers mount no personalities")
	}
	require.Greater(t, *d.Spec.Template.Spec.TerminationGracePeriodSeconds, int64(30), "longer than CAPSTAN_SHUTDOWN_GRACE")

	// The Job stores the ConfigMap's personalities as the operator.
	require.Len(t, job.Spec.Template.Spec.Containers, 1)
	jc := job.Spec.Template.Spec.Containers[0]
	require.Equal(t, []string{"/usr/local/bin/dispatcher"}, jc.Command)
	require.Equal(t, []string{"personality", "put", "/etc/capstan/personalities"}, jc.Args)
	require.Equal(t, c.Image, jc.Image)
	requireNATSUserFromSecret(t, jc, "operator", "capstan-nats-operator")
	require.Equal(t, "3", envOf(jc)["CAPSTAN_STREAM_REPLICAS"].Value)
	require.Equal(t, corev1.RestartPolicyOnFailure, job.Spec.Template.Spec.RestartPolicy)
	require.True(t, *job.Spec.Template.Spec.SecurityContext.RunAsNonRoot)
	require.True(t, *jc.SecurityContext.ReadOnlyRootFilesystem)
	require.False(t, *jc.SecurityContext.AllowPrivilegeEscalation)
	require.Equal(t, []corev1.Capability{"ALL"}, jc.SecurityContext.Capabilities.Drop)
	require.Len(t, jc.VolumeMounts, 1)
	require.Equal(t, "/etc/capstan/personalities", jc.VolumeMounts[0].MountPath)
	mounted := false
	for _, v := range job.Spec.Template.Spec.Volumes {
		if v.Name == jc.VolumeMounts[0].Name {
			require.Equal(t, cm.Name, v.ConfigMap.Name)
			mounted = true
		}
	}
	require.True(t, mounted, "the ConfigMap is mounted")

	// The ConfigMap is a copy of examples/personalities.
	files, err := filepath.Glob(filepath.Join(root, "examples", "personalities", "*.yaml"))
	require.NoError(t, err)
	var names []string
	for _, f := range files {
		name := filepath.Base(f)
		names = append(names, name)
		want, err := os.ReadFile(f)
		require.NoError(t, err)
		require.Equal(t, string(bytes.TrimRight(want, "\n")), strings.TrimRight(cm.Data[name], "\n"), "%s differs from examples/personalities", name)
	}
	var keys []string
	for k := range cm.Data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	require.Equal(t, names, keys)

	// The adapter rule names the metric the HPA uses.
	var rules struct {
		ExternalRules []struct {
			SeriesQuery  string         `json:"seriesQuery"`
			Resources    map[string]any `json:"resources"`
			Name         map[string]any `json:"name"`
			MetricsQuery string         `json:"metricsQuery"`
		} `json:"externalRules"`
	}
	require.NoError(t, yaml.UnmarshalStrict(read(t, "deploy/k8s/prometheus-adapter-rules.yaml"), &rules))
	require.Equal(t, "capstan_calls_pending", rules.ExternalRules[0].Name["as"])
}
