// Package validate renders repolock's kustomizations offline (kustomize's
// Go API, no cluster, no kubectl), decodes every object strictly into its
// Kubernetes API type (unknown or duplicate fields fail, as the API server's
// strict field validation would) and checks the rules the manifests promise
// in docs/operations.md: probes, non-root, resources, a read-only root,
// dropped capabilities, seccomp, pinned images, secrets by reference only,
// migrations in the init container, the CronJob's concurrency settings, and
// that Services, PodDisruptionBudgets and ServiceMonitors select what they
// are meant to.
//
// Its tests also check compose.yaml and the Containerfile (neither can run
// here: no Docker engine, no base image to pull).
//
// It is its own Go module so that the main module does not depend on
// kustomize and k8s.io/api; `make test-deploy` (part of `make test`) runs
// its tests.
package validate

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// Object is one rendered object, decoded into its API type (a pointer such
// as *appsv1.Deployment).
type Object struct {
	APIVersion string
	Kind       string
	Name       string
	Namespace  string
	Obj        any
}

func (o Object) String() string { return o.Kind + "/" + o.Name }

// types maps apiVersion/kind to a constructor of the typed object. A kind
// not listed is an error: every kind the manifests use must be checked.
var types = map[string]func() any{
	"v1/Namespace":                  func() any { return &corev1.Namespace{} },
	"v1/ServiceAccount":             func() any { return &corev1.ServiceAccount{} },
	"v1/ConfigMap":                  func() any { return &corev1.ConfigMap{} },
	"v1/Secret":                     func() any { return &corev1.Secret{} },
	"v1/Service":                    func() any { return &corev1.Service{} },
	"apps/v1/Deployment":            func() any { return &appsv1.Deployment{} },
	"batch/v1/Job":                  func() any { return &batchv1.Job{} },
	"batch/v1/CronJob":              func() any { return &batchv1.CronJob{} },
	"policy/v1/PodDisruptionBudget": func() any { return &policyv1.PodDisruptionBudget{} },
	"monitoring.coreos.com/v1/ServiceMonitor": func() any { return &monitoringv1.ServiceMonitor{} },
	"monitoring.coreos.com/v1/PrometheusRule": func() any { return &monitoringv1.PrometheusRule{} },
}

// Render runs kustomize on the kustomization in dir (on disk) and decodes
// every resulting object strictly.
func Render(dir string) ([]Object, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize %s: %w", dir, err)
	}
	var objs []Object
	var errs []error
	for _, r := range rm.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.CurId(), err)
		}
		o, err := Decode(y)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		objs = append(objs, o)
	}
	return objs, errors.Join(errs...)
}

// Decode decodes one YAML document strictly into its API type.
func Decode(doc []byte) (Object, error) {
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return Object{}, fmt.Errorf("yaml: %w", err)
	}
	var tm metav1.TypeMeta
	var om struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(js, &tm); err != nil {
		return Object{}, err
	}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(js, &om); err != nil {
		return Object{}, err
	}
	id := tm.Kind + "/" + om.Metadata.Name
	mk, ok := types[tm.APIVersion+"/"+tm.Kind]
	if !ok {
		return Object{}, fmt.Errorf("%s: apiVersion %q kind %q is not a type this validator knows", id, tm.APIVersion, tm.Kind)
	}
	obj := mk()
	strict, err := kjson.UnmarshalStrict(js, obj, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return Object{}, fmt.Errorf("%s: %w", id, err)
	}
	if len(strict) > 0 {
		return Object{}, fmt.Errorf("%s: strict decoding: %w", id, errors.Join(strict...))
	}
	return Object{APIVersion: tm.APIVersion, Kind: tm.Kind, Name: om.Metadata.Name, Namespace: om.Metadata.Namespace, Obj: obj}, nil
}

// secretEnv are the variables that may only come from a Secret.
var secretEnv = []string{"DATABASE_URL", "ADMIN_TOKEN"}

// Check returns every rule violation in objs, each naming the object and
// the rule.
func Check(objs []Object) []error {
	c := checker{configMaps: map[string]*corev1.ConfigMap{}}
	for _, o := range objs {
		switch v := o.Obj.(type) {
		case *corev1.ConfigMap:
			c.configMaps[v.Namespace+"/"+v.Name] = v
		case *corev1.Service:
			c.services = append(c.services, v)
		case *appsv1.Deployment:
			c.deployments = append(c.deployments, v)
		case *policyv1.PodDisruptionBudget:
			c.pdbs = append(c.pdbs, v)
		}
	}
	for _, o := range objs {
		switch v := o.Obj.(type) {
		case *corev1.Secret:
			c.errorf(o, "a Secret is part of the rendered manifests: create it outside them (kubectl create secret, a secret manager) and reference it with secretKeyRef")
		case *corev1.ConfigMap:
			for _, k := range secretEnv {
				if _, ok := v.Data[k]; ok {
					c.errorf(o, "%s is in a ConfigMap: it must come from a Secret (secretKeyRef)", k)
				}
			}
		case *appsv1.Deployment:
			c.deployment(o, v)
		case *batchv1.CronJob:
			c.cronJob(o, v)
		case *batchv1.Job:
			c.podSpec(o, v.Namespace, &v.Spec.Template.Spec)
		case *corev1.Service:
			c.service(o, v)
		case *policyv1.PodDisruptionBudget:
			c.pdb(o, v)
		case *monitoringv1.ServiceMonitor:
			c.serviceMonitor(o, v)
		}
	}
	for _, d := range c.deployments {
		if replicas(d) < 2 {
			continue
		}
		covered := false
		for _, p := range c.pdbs {
			if p.Namespace == d.Namespace && selects(p.Spec.Selector, d.Spec.Template.Labels) {
				covered = true
			}
		}
		if !covered {
			c.errs = append(c.errs, fmt.Errorf("Deployment/%s: no PodDisruptionBudget selects its pods", d.Name))
		}
	}
	return c.errs
}

type checker struct {
	configMaps  map[string]*corev1.ConfigMap
	services    []*corev1.Service
	deployments []*appsv1.Deployment
	pdbs        []*policyv1.PodDisruptionBudget
	errs        []error
}

func (c *checker) errorf(o Object, format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("%s: %s", o, fmt.Sprintf(format, args...)))
}

func replicas(d *appsv1.Deployment) int32 {
	if d.Spec.Replicas == nil {
		return 1
	}
	return *d.Spec.Replicas
}

func (c *checker) deployment(o Object, d *appsv1.Deployment) {
	if replicas(d) < 2 {
		c.errorf(o, "replicas is %d: run at least 2", replicas(d))
	}
	if d.Spec.Selector == nil || !selects(d.Spec.Selector, d.Spec.Template.Labels) {
		c.errorf(o, "the selector does not match the pod template's labels")
	}
	spec := &d.Spec.Template.Spec
	c.podSpec(o, d.Namespace, spec)

	migratesInInit := false
	for _, ic := range spec.InitContainers {
		if slices.Equal(ic.Args, []string{"migrate", "up"}) {
			migratesInInit = true
		}
	}
	for i := range spec.Containers {
		ct := &spec.Containers[i]
		if len(ct.Ports) == 0 {
			continue
		}
		where := "container " + ct.Name
		c.probe(o, where, "startupProbe", ct.StartupProbe, "", ct.Ports)
		c.probe(o, where, "readinessProbe", ct.ReadinessProbe, "/readyz", ct.Ports)
		c.probe(o, where, "livenessProbe", ct.LivenessProbe, "/healthz", ct.Ports)

		env := c.effectiveEnv(d.Namespace, ct)
		listen, ok := env["LISTEN_ADDR"]
		if !ok {
			c.errorf(o, "%s: LISTEN_ADDR is not set; the binary's default 127.0.0.1:8080 is unreachable from outside the pod", where)
		} else if host, port, err := net.SplitHostPort(listen); err != nil || (host != "" && host != "0.0.0.0" && host != "::") {
			c.errorf(o, "%s: LISTEN_ADDR=%s does not listen on all interfaces", where, listen)
		} else if !slices.ContainsFunc(ct.Ports, func(p corev1.ContainerPort) bool { return fmt.Sprint(p.ContainerPort) == port }) {
			c.errorf(o, "%s: LISTEN_ADDR=%s is not one of the container's ports", where, listen)
		}
		if migratesInInit && env["MIGRATE_ON_START"] != "false" {
			c.errorf(o, "%s: the init container runs the migrations, so MIGRATE_ON_START must be false (it is %q)", where, env["MIGRATE_ON_START"])
		}
		// The pod must get SIGKILL only after the preStop hook and the
		// server's own graceful shutdown.
		grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
		if spec.TerminationGracePeriodSeconds != nil {
			grace = *spec.TerminationGracePeriodSeconds
		}
		need := 20 * time.Second // SHUTDOWN_TIMEOUT's default
		if s, ok := env["SHUTDOWN_TIMEOUT"]; ok {
			d, err := time.ParseDuration(s)
			if err != nil {
				c.errorf(o, "%s: SHUTDOWN_TIMEOUT=%q is not a duration", where, s)
			}
			need = d
		}
		if ct.Lifecycle != nil && ct.Lifecycle.PreStop != nil && ct.Lifecycle.PreStop.Sleep != nil {
			need += time.Duration(ct.Lifecycle.PreStop.Sleep.Seconds) * time.Second
		}
		if time.Duration(grace)*time.Second <= need {
			c.errorf(o, "%s: terminationGracePeriodSeconds %d does not cover the preStop sleep plus SHUTDOWN_TIMEOUT (%s)", where, grace, need)
		}
	}
}

func (c *checker) probe(o Object, where, name string, p *corev1.Probe, wantPath string, ports []corev1.ContainerPort) {
	if p == nil {
		c.errorf(o, "%s has no %s", where, name)
		return
	}
	if p.HTTPGet == nil {
		c.errorf(o, "%s: %s is not an HTTP probe", where, name)
		return
	}
	if wantPath != "" && p.HTTPGet.Path != wantPath {
		c.errorf(o, "%s: %s checks %q, want %q", where, name, p.HTTPGet.Path, wantPath)
	}
	if !hasPort(ports, p.HTTPGet.Port) {
		c.errorf(o, "%s: %s port %s is not a container port", where, name, p.HTTPGet.Port.String())
	}
}

func hasPort(ports []corev1.ContainerPort, p intstr.IntOrString) bool {
	return slices.ContainsFunc(ports, func(cp corev1.ContainerPort) bool {
		if p.Type == intstr.String {
			return cp.Name == p.StrVal
		}
		return cp.ContainerPort == p.IntVal
	})
}

// effectiveEnv is a container's environment as the kubelet builds it:
// envFrom ConfigMaps, then env values (env wins). Values from Secrets are
// left out (they are not known here).
func (c *checker) effectiveEnv(ns string, ct *corev1.Container) map[string]string {
	env := map[string]string{}
	for _, ef := range ct.EnvFrom {
		if ef.ConfigMapRef == nil {
			continue
		}
		if cm := c.configMaps[ns+"/"+ef.ConfigMapRef.Name]; cm != nil {
			for k, v := range cm.Data {
				env[ef.Prefix+k] = v
			}
		}
	}
	for _, e := range ct.Env {
		if e.ValueFrom == nil {
			env[e.Name] = e.Value
		} else {
			delete(env, e.Name)
		}
	}
	return env
}

func (c *checker) podSpec(o Object, ns string, spec *corev1.PodSpec) {
	psc := spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	if psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		c.errorf(o, "pod securityContext.runAsNonRoot is not true")
	}
	podSeccomp := psc.SeccompProfile != nil && psc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault
	all := make([]*corev1.Container, 0, len(spec.InitContainers)+len(spec.Containers))
	for i := range spec.InitContainers {
		all = append(all, &spec.InitContainers[i])
	}
	for i := range spec.Containers {
		all = append(all, &spec.Containers[i])
	}
	for _, ct := range all {
		where := "container " + ct.Name
		if err := imageRule(ct.Image); err != nil {
			c.errorf(o, "%s: %v", where, err)
		}
		sc := ct.SecurityContext
		if sc == nil {
			sc = &corev1.SecurityContext{}
		}
		uid := psc.RunAsUser
		if sc.RunAsUser != nil {
			uid = sc.RunAsUser
		}
		if uid == nil || *uid == 0 {
			c.errorf(o, "%s: no numeric non-root runAsUser (pod or container securityContext)", where)
		}
		if sc.RunAsNonRoot != nil && !*sc.RunAsNonRoot {
			c.errorf(o, "%s: securityContext.runAsNonRoot is false", where)
		}
		if !podSeccomp && (sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault) {
			c.errorf(o, "%s: seccompProfile is not RuntimeDefault (pod or container securityContext)", where)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			c.errorf(o, "%s: securityContext.allowPrivilegeEscalation is not false", where)
		}
		if sc.Privileged != nil && *sc.Privileged {
			c.errorf(o, "%s: privileged", where)
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			c.errorf(o, "%s: securityContext.readOnlyRootFilesystem is not true", where)
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			c.errorf(o, "%s: capabilities do not drop ALL", where)
		} else if len(sc.Capabilities.Add) > 0 {
			c.errorf(o, "%s: adds capabilities %v", where, sc.Capabilities.Add)
		}
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if _, ok := ct.Resources.Requests[r]; !ok {
				c.errorf(o, "%s: no %s request", where, r)
			}
			if _, ok := ct.Resources.Limits[r]; !ok {
				c.errorf(o, "%s: no %s limit", where, r)
			}
		}
		for _, e := range ct.Env {
			if slices.Contains(secretEnv, e.Name) && (e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil) {
				c.errorf(o, "%s: %s must come from a Secret (valueFrom.secretKeyRef), not a literal or another source", where, e.Name)
			}
			if looksLikeCredential(e.Value) {
				c.errorf(o, "%s: env %s holds a credential literally", where, e.Name)
			}
		}
		for _, ef := range ct.EnvFrom {
			if ef.SecretRef != nil {
				continue
			}
			if ef.ConfigMapRef != nil && c.configMaps[ns+"/"+ef.ConfigMapRef.Name] == nil {
				c.errorf(o, "%s: envFrom ConfigMap %q is not part of the manifests", where, ef.ConfigMapRef.Name)
			}
		}
	}
}

// looksLikeCredential reports a URL with a password (postgres://u:p@h/...).
func looksLikeCredential(v string) bool {
	i := strings.Index(v, "://")
	if i < 0 {
		return false
	}
	rest := v[i+3:]
	at := strings.IndexByte(rest, '@')
	return at > 0 && strings.Contains(rest[:at], ":")
}

// imageRule: an explicit tag other than latest, or a digest.
func imageRule(image string) error {
	if image == "" {
		return errors.New("no image")
	}
	if strings.Contains(image, "@sha256:") {
		return nil
	}
	name := image
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	i := strings.LastIndexByte(name, ':')
	if i < 0 {
		return fmt.Errorf("image %q has no tag (that means :latest): pin a version or a digest", image)
	}
	if name[i+1:] == "latest" {
		return fmt.Errorf("image %q uses :latest: pin a version or a digest", image)
	}
	return nil
}

func (c *checker) cronJob(o Object, cj *batchv1.CronJob) {
	if cj.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent {
		c.errorf(o, "concurrencyPolicy is %q, want Forbid", cj.Spec.ConcurrencyPolicy)
	}
	if cj.Spec.StartingDeadlineSeconds == nil || *cj.Spec.StartingDeadlineSeconds <= 0 {
		c.errorf(o, "no startingDeadlineSeconds")
	}
	if cj.Spec.SuccessfulJobsHistoryLimit == nil {
		c.errorf(o, "no successfulJobsHistoryLimit")
	}
	if cj.Spec.FailedJobsHistoryLimit == nil {
		c.errorf(o, "no failedJobsHistoryLimit")
	}
	js := cj.Spec.JobTemplate.Spec
	if js.ActiveDeadlineSeconds == nil {
		c.errorf(o, "no activeDeadlineSeconds: a hung run would hold the schedule (Forbid) forever")
	}
	if rp := js.Template.Spec.RestartPolicy; rp != corev1.RestartPolicyNever && rp != corev1.RestartPolicyOnFailure {
		c.errorf(o, "restartPolicy is %q, want Never or OnFailure", rp)
	}
	c.podSpec(o, cj.Namespace, &js.Template.Spec)
}

func (c *checker) service(o Object, s *corev1.Service) {
	var target *appsv1.Deployment
	for _, d := range c.deployments {
		if d.Namespace == s.Namespace && len(s.Spec.Selector) > 0 &&
			labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
			target = d
		}
	}
	if target == nil {
		c.errorf(o, "selects no Deployment's pods")
		return
	}
	var ports []corev1.ContainerPort
	for _, ct := range target.Spec.Template.Spec.Containers {
		ports = append(ports, ct.Ports...)
	}
	for _, p := range s.Spec.Ports {
		tp := p.TargetPort
		if tp.Type == intstr.Int && tp.IntVal == 0 {
			tp = intstr.FromInt32(p.Port)
		}
		if !hasPort(ports, tp) {
			c.errorf(o, "port %q targets %s, which Deployment/%s does not expose", p.Name, tp.String(), target.Name)
		}
	}
}

func (c *checker) pdb(o Object, p *policyv1.PodDisruptionBudget) {
	for _, d := range c.deployments {
		if d.Namespace == p.Namespace && selects(p.Spec.Selector, d.Spec.Template.Labels) {
			if p.Spec.MinAvailable != nil && p.Spec.MinAvailable.Type == intstr.Int && p.Spec.MinAvailable.IntVal >= replicas(d) {
				c.errorf(o, "minAvailable %d blocks every voluntary eviction of Deployment/%s (%d replicas)", p.Spec.MinAvailable.IntVal, d.Name, replicas(d))
			}
			return
		}
	}
	c.errorf(o, "selects no Deployment's pods")
}

func (c *checker) serviceMonitor(o Object, sm *monitoringv1.ServiceMonitor) {
	for _, s := range c.services {
		if s.Namespace != sm.Namespace || !selects(&sm.Spec.Selector, s.Labels) {
			continue
		}
		for _, ep := range sm.Spec.Endpoints {
			if ep.Port == "" || !slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }) {
				c.errorf(o, "endpoint port %q is not a named port of Service/%s", ep.Port, s.Name)
			}
		}
		return
	}
	c.errorf(o, "selects no Service (by the Service's own labels)")
}

func selects(sel *metav1.LabelSelector, l map[string]string) bool {
	if sel == nil {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil || s.Empty() {
		return false
	}
	return s.Matches(labels.Set(l))
}

// Find returns the objects of a kind.
func Find(objs []Object, kind string) []Object {
	var out []Object
	for _, o := range objs {
		if o.Kind == kind {
			out = append(out, o)
		}
	}
	return out
}

// YAML renders objs back to one multi-document YAML stream (for debugging
// a failing test).
func YAML(objs []Object) string {
	var b bytes.Buffer
	for _, o := range objs {
		y, _ := yaml.Marshal(o.Obj)
		b.WriteString("---\n")
		b.Write(y)
	}
	return b.String()
}
