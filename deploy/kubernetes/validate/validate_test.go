package validate

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

const (
	baseDir      = "../base"
	overlayDir   = "../overlays/example"
	componentDir = "../components/servicemonitor"
)

func render(t *testing.T, dir string) []Object {
	t.Helper()
	objs, err := Render(dir)
	if err != nil {
		t.Fatalf("render %s: %v", dir, err)
	}
	return objs
}

func mustPass(t *testing.T, objs []Object) {
	t.Helper()
	for _, err := range Check(objs) {
		t.Errorf("violation: %v", err)
	}
	if t.Failed() {
		t.Logf("rendered:\n%s", YAML(objs))
	}
}

func ids(objs []Object) []string {
	var out []string
	for _, o := range objs {
		name := o.Name
		if o.Kind == "ConfigMap" {
			// generated: name-<hash>
			name = name[:strings.LastIndexByte(name, '-')] + "-<hash>"
		}
		out = append(out, o.Namespace+"/"+o.Kind+"/"+name)
	}
	slices.Sort(out)
	return out
}

func one[T any](t *testing.T, objs []Object, kind string) T {
	t.Helper()
	found := Find(objs, kind)
	if len(found) != 1 {
		t.Fatalf("%d objects of kind %s, want 1", len(found), kind)
	}
	return found[0].Obj.(T)
}

func images(objs []Object) []string {
	var out []string
	add := func(spec *corev1.PodSpec) {
		for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
			out = append(out, c.Name+"="+c.Image)
		}
	}
	for _, o := range objs {
		switch v := o.Obj.(type) {
		case *appsv1.Deployment:
			add(&v.Spec.Template.Spec)
		case *batchv1.CronJob:
			add(&v.Spec.JobTemplate.Spec.Template.Spec)
		}
	}
	slices.Sort(out)
	return out
}

func TestBase(t *testing.T) {
	objs := render(t, baseDir)
	mustPass(t, objs)

	want := []string{
		"/ConfigMap/repolock-config-<hash>",
		"/CronJob/repolock-gc",
		"/Deployment/repolock",
		"/PodDisruptionBudget/repolock",
		"/Service/repolock",
		"/ServiceAccount/repolock",
	}
	if got := ids(objs); !slices.Equal(got, want) {
		t.Errorf("objects = %v, want %v", got, want)
	}
	wantImages := []string{"api=registry.example.com/repolock:0.1.0", "gc=registry.example.com/repolock:0.1.0", "migrate=registry.example.com/repolock:0.1.0"}
	if got := images(objs); !slices.Equal(got, wantImages) {
		t.Errorf("images = %v, want %v", got, wantImages)
	}

	d := one[*appsv1.Deployment](t, objs, "Deployment")
	if *d.Spec.Replicas != 2 {
		t.Errorf("replicas = %d, want 2", *d.Spec.Replicas)
	}
	if got := d.Spec.Template.Spec.InitContainers[0].Args; !slices.Equal(got, []string{"migrate", "up"}) {
		t.Errorf("init container args = %v, want [migrate up]", got)
	}
	cm := one[*corev1.ConfigMap](t, objs, "ConfigMap")
	for k, v := range map[string]string{"LISTEN_ADDR": "0.0.0.0:8080", "MIGRATE_ON_START": "false", "GC_INTERVAL": "0"} {
		if cm.Data[k] != v {
			t.Errorf("ConfigMap %s = %q, want %q", k, cm.Data[k], v)
		}
	}
	// The Deployment and the CronJob refer to the generated (hashed) name.
	for _, c := range append(d.Spec.Template.Spec.InitContainers, d.Spec.Template.Spec.Containers...) {
		if c.EnvFrom[0].ConfigMapRef.Name != cm.Name {
			t.Errorf("container %s reads ConfigMap %q, want %q", c.Name, c.EnvFrom[0].ConfigMapRef.Name, cm.Name)
		}
	}
	cj := one[*batchv1.CronJob](t, objs, "CronJob")
	if cj.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent || *cj.Spec.StartingDeadlineSeconds != 300 {
		t.Errorf("CronJob concurrencyPolicy %q startingDeadlineSeconds %d, want Forbid 300", cj.Spec.ConcurrencyPolicy, *cj.Spec.StartingDeadlineSeconds)
	}
	if got := cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Args; !slices.Equal(got, []string{"gc"}) {
		t.Errorf("CronJob args = %v, want [gc]", got)
	}
}

func TestOverlayExample(t *testing.T) {
	objs := render(t, overlayDir)
	mustPass(t, objs)

	want := []string{
		"/Namespace/repolock",
		"repolock/ConfigMap/repolock-config-<hash>",
		"repolock/CronJob/repolock-gc",
		"repolock/Deployment/repolock",
		"repolock/PodDisruptionBudget/repolock",
		"repolock/Service/repolock",
		"repolock/ServiceAccount/repolock",
	}
	if got := ids(objs); !slices.Equal(got, want) {
		t.Errorf("objects = %v, want %v", got, want)
	}
	img := "registry.example.com/platform/repolock:0.1.0"
	wantImages := []string{"api=" + img, "gc=" + img, "migrate=" + img}
	if got := images(objs); !slices.Equal(got, wantImages) {
		t.Errorf("images = %v, want %v", got, wantImages)
	}
	cm := one[*corev1.ConfigMap](t, objs, "ConfigMap")
	if cm.Data["GC_MIN_AGE"] != "5m" || cm.Data["LISTEN_ADDR"] != "0.0.0.0:8080" {
		t.Errorf("merged ConfigMap: GC_MIN_AGE=%q LISTEN_ADDR=%q, want 5m and the base's 0.0.0.0:8080", cm.Data["GC_MIN_AGE"], cm.Data["LISTEN_ADDR"])
	}
	ns := one[*corev1.Namespace](t, objs, "Namespace")
	if ns.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
		t.Errorf("namespace enforce label = %q, want restricted", ns.Labels["pod-security.kubernetes.io/enforce"])
	}
}

// writeKustomization writes a kustomization.yaml into a new temporary
// directory; {base}, {overlay} and {component} in it become the paths of
// those directories relative to it (kustomize refuses absolute ones).
func writeKustomization(t *testing.T, body string, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	rel := func(p string) string {
		a, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		r, err := filepath.Rel(dir, a)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	body = strings.NewReplacer("{base}", rel(baseDir), "{overlay}", rel(overlayDir), "{component}", rel(componentDir)).Replace(body)
	files["kustomization.yaml"] = body
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestOverlayWithServiceMonitor(t *testing.T) {
	dir := writeKustomization(t, `
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
# As when the overlay lists the component: the overlay's namespace.
namespace: repolock
resources:
  - {overlay}
components:
  - {component}
`, map[string]string{})
	objs := render(t, dir)
	mustPass(t, objs)
	sm := one[*monitoringv1.ServiceMonitor](t, objs, "ServiceMonitor")
	if sm.Namespace != "repolock" || len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "http" || sm.Spec.Endpoints[0].Path != "/metrics" {
		t.Errorf("ServiceMonitor namespace %q endpoints %+v, want repolock, one endpoint port http path /metrics", sm.Namespace, sm.Spec.Endpoints)
	}
	// The alerts (generated from deploy/prometheus/repolock-rules.yml;
	// deploy/prometheus/validate checks they are the same rules and parse).
	pr := one[*monitoringv1.PrometheusRule](t, objs, "PrometheusRule")
	alerts := map[string]bool{}
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" && r.Expr.String() != "" {
				alerts[r.Alert] = true
			}
		}
	}
	if pr.Namespace != "repolock" || !alerts["RepolockGCNotSucceeding"] || !alerts["RepolockDatabaseUnavailable"] {
		t.Errorf("PrometheusRule namespace %q alerts %v, want repolock with RepolockGCNotSucceeding and RepolockDatabaseUnavailable", pr.Namespace, alerts)
	}
}

// TestViolations proves that the checks catch what they are meant to: each
// case patches the base and must produce a violation containing want (and
// the unpatched base passes, TestBase).
func TestViolations(t *testing.T) {
	deploymentPatch := func(ops string) string {
		return `
patches:
  - target: {kind: Deployment, name: repolock}
    patch: |-
` + indent(ops, "      ")
	}
	cases := []struct {
		name  string
		kust  string
		files map[string]string
		want  string // substring of one violation or of the render error
	}{
		{"latest tag", `
images:
  - name: registry.example.com/repolock
    newTag: latest
`, nil, `uses :latest`},
		{"untagged image", deploymentPatch(`- op: replace
  path: /spec/template/spec/initContainers/0/image
  value: example.org/other`), nil, `container migrate: image "example.org/other" has no tag`},
		{"missing readiness probe", deploymentPatch(`- op: remove
  path: /spec/template/spec/containers/0/readinessProbe`), nil, `container api has no readinessProbe`},
		{"missing startup probe", deploymentPatch(`- op: remove
  path: /spec/template/spec/containers/0/startupProbe`), nil, `container api has no startupProbe`},
		{"liveness probe on /readyz", deploymentPatch(`- op: replace
  path: /spec/template/spec/containers/0/livenessProbe/httpGet/path
  value: /readyz`), nil, `livenessProbe checks "/readyz", want "/healthz"`},
		{"probe on an undeclared port", deploymentPatch(`- op: replace
  path: /spec/template/spec/containers/0/readinessProbe/httpGet/port
  value: metrics`), nil, `readinessProbe port metrics is not a container port`},
		{"runs as root", deploymentPatch(`- op: replace
  path: /spec/template/spec/securityContext/runAsUser
  value: 0`), nil, `container api: no numeric non-root runAsUser`},
		{"runAsNonRoot removed", deploymentPatch(`- op: remove
  path: /spec/template/spec/securityContext/runAsNonRoot`), nil, `runAsNonRoot is not true`},
		{"no seccomp", deploymentPatch(`- op: remove
  path: /spec/template/spec/securityContext/seccompProfile`), nil, `container migrate: seccompProfile is not RuntimeDefault`},
		{"writable root", deploymentPatch(`- op: replace
  path: /spec/template/spec/containers/0/securityContext/readOnlyRootFilesystem
  value: false`), nil, `readOnlyRootFilesystem is not true`},
		{"privilege escalation", deploymentPatch(`- op: remove
  path: /spec/template/spec/initContainers/0/securityContext/allowPrivilegeEscalation`), nil, `container migrate: securityContext.allowPrivilegeEscalation is not false`},
		{"capabilities kept", deploymentPatch(`- op: replace
  path: /spec/template/spec/containers/0/securityContext/capabilities/drop
  value: ["NET_RAW"]`), nil, `capabilities do not drop ALL`},
		{"no memory limit", deploymentPatch(`- op: remove
  path: /spec/template/spec/containers/0/resources/limits/memory`), nil, `container api: no memory limit`},
		{"one replica", deploymentPatch(`- op: replace
  path: /spec/replicas
  value: 1`), nil, `replicas is 1`},
		{"database URL as a literal", deploymentPatch(`- op: replace
  path: /spec/template/spec/containers/0/env/0
  value: {name: DATABASE_URL, value: "postgres://repolock:hunter2@db:5432/repolock"}`), nil, `DATABASE_URL must come from a Secret`},
		{"admin token in the ConfigMap", `
configMapGenerator:
  - name: repolock-config
    behavior: merge
    literals: [ADMIN_TOKEN=rla_x]
`, nil, `ADMIN_TOKEN is in a ConfigMap`},
		{"a Secret in the manifests", `
secretGenerator:
  - name: repolock
    literals: [database-url=postgres://x, admin-token=y]
`, nil, `a Secret is part of the rendered manifests`},
		{"migrate on start with the init container", `
configMapGenerator:
  - name: repolock-config
    behavior: merge
    literals: [MIGRATE_ON_START=true]
`, nil, `MIGRATE_ON_START must be false`},
		{"listening on localhost", `
configMapGenerator:
  - name: repolock-config
    behavior: merge
    literals: [LISTEN_ADDR=127.0.0.1:8080]
`, nil, `LISTEN_ADDR=127.0.0.1:8080 does not listen on all interfaces`},
		{"shutdown longer than the grace period", `
configMapGenerator:
  - name: repolock-config
    behavior: merge
    literals: [SHUTDOWN_TIMEOUT=60s]
`, nil, `terminationGracePeriodSeconds 30 does not cover`},
		{"CronJob allows concurrent runs", `
patches:
  - target: {kind: CronJob, name: repolock-gc}
    patch: |-
      - op: replace
        path: /spec/concurrencyPolicy
        value: Allow
`, nil, `concurrencyPolicy is "Allow", want Forbid`},
		{"CronJob without a starting deadline", `
patches:
  - target: {kind: CronJob, name: repolock-gc}
    patch: |-
      - op: remove
        path: /spec/startingDeadlineSeconds
`, nil, `no startingDeadlineSeconds`},
		{"Service targets a missing port", `
patches:
  - target: {kind: Service, name: repolock}
    patch: |-
      - op: replace
        path: /spec/ports/0/targetPort
        value: web
`, nil, `targets web, which Deployment/repolock does not expose`},
		{"PDB selects nothing", `
patches:
  - target: {kind: PodDisruptionBudget, name: repolock}
    patch: |-
      - op: replace
        path: /spec/selector/matchLabels/app.kubernetes.io~1component
        value: web
`, nil, `Deployment/repolock: no PodDisruptionBudget selects its pods`},
		{"unknown field", deploymentPatch(`- op: add
  path: /spec/template/spec/containers/0/securityContext/readOnlyRootFS
  value: true`), nil, `unknown field "spec.template.spec.containers[0].securityContext.readOnlyRootFS"`},
		{"wrongly cased field", deploymentPatch(`- op: add
  path: /spec/template/spec/containers/0/securityContext/runasnonroot
  value: true`), nil, `unknown field`},
		{"unknown kind", `
resources: [extra.yaml]
`, map[string]string{"extra.yaml": "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n"}, `kind "Pod" is not a type this validator knows`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]string{}
			for k, v := range tc.files {
				files[k] = v
			}
			dir := writeKustomization(t, "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {base}\n"+tc.kust, files)
			objs, err := Render(dir)
			var msgs []string
			if err != nil {
				msgs = append(msgs, err.Error())
			} else {
				for _, v := range Check(objs) {
					msgs = append(msgs, v.Error())
				}
			}
			if !slices.ContainsFunc(msgs, func(m string) bool { return strings.Contains(m, tc.want) }) {
				t.Errorf("want a violation containing %q, got %d:\n  %s", tc.want, len(msgs), strings.Join(msgs, "\n  "))
			}
		})
	}
}

func indent(s, prefix string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return strings.Join(lines, "\n") + "\n"
}

func TestImageRule(t *testing.T) {
	for image, ok := range map[string]bool{
		"registry.example.com/repolock:0.1.0":             true,
		"localhost:5000/repolock:v1":                      true,
		"repolock@sha256:" + strings.Repeat("a", 64):      true,
		"registry.example.com/repolock":                   false,
		"localhost:5000/repolock":                         false,
		"registry.example.com/repolock:latest":            false,
		"registry.example.com/repolock:0.1.0@sha256:abcd": true,
	} {
		if err := imageRule(image); (err == nil) != ok {
			t.Errorf("imageRule(%q) = %v, want ok=%v", image, err, ok)
		}
	}
}

// TestCompose checks compose.yaml at the repository root: it parses, the
// service is built from the Containerfile, listens on all interfaces, gets
// its database from the postgres:15 service once that is healthy, and runs
// with the image's hardening. (No Docker engine here to run it.)
func TestCompose(t *testing.T) {
	data, err := os.ReadFile("../../../compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Services map[string]struct {
			Image       string `json:"image"`
			Build       *struct{ Context, Dockerfile string }
			Environment map[string]string `json:"environment"`
			DependsOn   map[string]struct {
				Condition string `json:"condition"`
			} `json:"depends_on"`
			Healthcheck *struct {
				Test []string `json:"test"`
			} `json:"healthcheck"`
			ReadOnly    bool     `json:"read_only"`
			CapDrop     []string `json:"cap_drop"`
			SecurityOpt []string `json:"security_opt"`
			Ports       []string `json:"ports"`
		} `json:"services"`
	}
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	pg, ok := f.Services["postgres"]
	if !ok || pg.Image != "docker.io/library/postgres:15" || pg.Healthcheck == nil || len(pg.Healthcheck.Test) == 0 {
		t.Errorf("postgres service: %+v, want image docker.io/library/postgres:15 with a healthcheck", pg)
	}
	api, ok := f.Services["repolock"]
	if !ok {
		t.Fatalf("no service repolock in compose.yaml")
	}
	if api.Build == nil || api.Build.Dockerfile != "Containerfile" {
		t.Errorf("repolock service build = %+v, want dockerfile Containerfile", api.Build)
	} else if _, err := os.Stat(filepath.Join("../../..", api.Build.Context, api.Build.Dockerfile)); err != nil {
		t.Errorf("repolock service build file: %v", err)
	}
	if api.Environment["LISTEN_ADDR"] != "0.0.0.0:8080" || !strings.Contains(api.Environment["DATABASE_URL"], "@postgres:5432/") {
		t.Errorf("repolock environment = %v, want LISTEN_ADDR=0.0.0.0:8080 and DATABASE_URL on host postgres", api.Environment)
	}
	if api.DependsOn["postgres"].Condition != "service_healthy" {
		t.Errorf("repolock depends_on = %+v, want postgres: service_healthy", api.DependsOn)
	}
	if !api.ReadOnly || !slices.Equal(api.CapDrop, []string{"ALL"}) || !slices.Contains(api.SecurityOpt, "no-new-privileges:true") {
		t.Errorf("repolock hardening: read_only %v cap_drop %v security_opt %v", api.ReadOnly, api.CapDrop, api.SecurityOpt)
	}
}

// TestContainerfile checks the Containerfile, which cannot be built here
// (no base image can be pulled; `make test-image` tests the image
// scripts/image.sh assembles instead): the final stage has the properties
// the docs promise and the same entrypoint, command, user, environment and
// labels as scripts/image.sh sets.
func TestContainerfile(t *testing.T) {
	data, err := os.ReadFile("../../../Containerfile")
	if err != nil {
		t.Fatal(err)
	}
	// Instructions, with continuation lines joined and comments dropped.
	var instrs []string
	var cur strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\") + " ")
			continue
		}
		cur.WriteString(trimmed)
		instrs = append(instrs, cur.String())
		cur.Reset()
	}
	var stages [][]string
	for _, in := range instrs {
		if strings.HasPrefix(in, "FROM ") {
			stages = append(stages, nil)
		}
		if len(stages) > 0 {
			stages[len(stages)-1] = append(stages[len(stages)-1], in)
		}
	}
	if len(stages) != 2 {
		t.Fatalf("%d stages, want 2 (builder, runtime)", len(stages))
	}
	has := func(stage []string, want string) bool {
		return slices.ContainsFunc(stage, func(in string) bool { return strings.Contains(in, want) })
	}
	build, final := stages[0], stages[1]
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "./cmd/api"} {
		if !has(build, want) {
			t.Errorf("builder stage has no %q", want)
		}
	}
	for _, want := range []string{
		"FROM gcr.io/distroless/static-debian12:nonroot",
		"COPY --from=build /out/repolock /repolock",
		"ENV LISTEN_ADDR=0.0.0.0:8080",
		"USER 65532:65532",
		`ENTRYPOINT ["/repolock"]`,
		`CMD ["serve"]`,
		`org.opencontainers.image.source="${SOURCE}"`,
		`org.opencontainers.image.version="${VERSION}"`,
		`org.opencontainers.image.revision="${REVISION}"`,
	} {
		if !has(final, want) {
			t.Errorf("final stage has no %q", want)
		}
	}
	if has(final, "RUN ") {
		t.Errorf("final stage runs a command: the image has no shell")
	}

	script, err := os.ReadFile("../../../scripts/image.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"--user 65532:65532",
		"--env LISTEN_ADDR=0.0.0.0:8080",
		`--entrypoint '["/repolock"]'`,
		"--cmd serve",
		"org.opencontainers.image.source=",
		"org.opencontainers.image.version=",
		"org.opencontainers.image.revision=",
		"CGO_ENABLED=0",
		"-trimpath",
	} {
		if !strings.Contains(string(script), want) {
			t.Errorf("scripts/image.sh does not set %q like the Containerfile", want)
		}
	}
}
