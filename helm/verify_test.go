package helm_test

import (
	"reflect"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestVerifyCronJob checks the optional CronJob of `aggregator verify`:
// off by default; on, it runs verify over the last verify.window with the
// pods' image, config, environment, Secrets and security context, once at
// a time, failing its Job on exit 1 without retrying, and its pod is not
// one of the release's.
func TestVerifyCronJob(t *testing.T) {
	if k := kinds(mustRender(t, readValues(t, ""))); slices.Contains(k, "CronJob") {
		t.Errorf("the defaults render %v, want no CronJob (verify.enabled is false)", k)
	}
	objs := mustRender(t, readValues(t, fullValues))
	d := decode[appsv1.Deployment](t, objs, "Deployment")
	cj := decodeNamed[batchv1.CronJob](t, objs, "CronJob", releaseName+"-verify")
	if cj.Spec.Schedule != "15 4 * * *" || cj.Spec.TimeZone == nil || *cj.Spec.TimeZone != "Europe/Berlin" || cj.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent {
		t.Errorf("schedule %q, time zone %v, concurrency %s: want the values' and Forbid", cj.Spec.Schedule, cj.Spec.TimeZone, cj.Spec.ConcurrencyPolicy)
	}
	job := cj.Spec.JobTemplate.Spec
	pod, jobPod := d.Spec.Template.Spec, job.Template.Spec
	c, jc := container(t, pod), container(t, jobPod)
	if want := []string{"verify", "--config", "/etc/aggregator/config.yaml", "--from", "-36h", "--max-diffs", "20"}; !slices.Equal(jc.Args, want) {
		t.Errorf("args = %v, want %v", jc.Args, want)
	}
	if jc.Image != c.Image || !reflect.DeepEqual(jc.Env, c.Env) || !reflect.DeepEqual(jc.EnvFrom, c.EnvFrom) ||
		!reflect.DeepEqual(jc.VolumeMounts, c.VolumeMounts) || !reflect.DeepEqual(jc.SecurityContext, c.SecurityContext) ||
		!reflect.DeepEqual(jobPod.SecurityContext, pod.SecurityContext) || !reflect.DeepEqual(jobPod.Volumes, pod.Volumes) {
		t.Errorf("verify's container differs from the pods' in image, env, volumes or security context:\n%+v\nwant like\n%+v", jc, c)
	}
	checkSecurity(t, jobPod, jc)
	if jobPod.RestartPolicy != corev1.RestartPolicyNever || *job.BackoffLimit != 0 {
		t.Errorf("restartPolicy %s, backoffLimit %d: want Never and 0 (a difference does not go away on a retry)", jobPod.RestartPolicy, *job.BackoffLimit)
	}
	if selects(d.Spec.Selector.MatchLabels, job.Template.Labels) {
		t.Errorf("verify pod labels %v match the release's selector %v", job.Template.Labels, d.Spec.Selector.MatchLabels)
	}
	for _, bad := range []string{"verify: {window: -24h}", "verify: {window: a day}", "verify: {schedule: ''}", "verify: {maxDiffs: -1}", "verify: {enabled: true, typo: 1}"} {
		if _, err := render(t, parseValues(t, bad)); err == nil {
			t.Errorf("values %s rendered, want the schema to reject them", bad)
		}
	}
}
