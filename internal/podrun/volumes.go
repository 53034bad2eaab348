package podrun

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// volume is a pod volume's path on this machine.
type volume struct {
	path     string
	readOnly bool // secret and configMap volumes are always mounted read-only
}

// prepareVolumes makes every volume of the pod: secret and configMap
// contents written as files, emptyDir folders, claims looked up in
// Options.Claims or through their PersistentVolumes (claimPath). An error leaves the pod Pending (the kubelet's
// FailedMount) until a retry succeeds.
func (w *podWorker) prepareVolumes(ctx context.Context, pod *corev1.Pod) (map[string]volume, error) {
	vols := map[string]volume{}
	for _, v := range pod.Spec.Volumes {
		dir := filepath.Join(w.dir, "volumes", v.Name)
		switch {
		case v.Secret != nil:
			data, err := w.secretData(ctx, v.Secret)
			if err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
			if err := writeFiles(dir, data, v.Secret.Items, v.Secret.DefaultMode); err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
			vols[v.Name] = volume{path: dir, readOnly: true}
		case v.ConfigMap != nil:
			data, err := w.configMapData(ctx, v.ConfigMap)
			if err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
			if err := writeFiles(dir, data, v.ConfigMap.Items, v.ConfigMap.DefaultMode); err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
			vols[v.Name] = volume{path: dir, readOnly: true}
		case v.EmptyDir != nil:
			if err := os.MkdirAll(dir, 0o777); err != nil {
				return nil, err
			}
			// The kubelet makes emptyDir world-writable (0777), whatever
			// the umask.
			if err := os.Chmod(dir, 0o777); err != nil {
				return nil, err
			}
			vols[v.Name] = volume{path: dir}
		case v.PersistentVolumeClaim != nil:
			p, err := w.claimPath(ctx, pod.Namespace, v.PersistentVolumeClaim.ClaimName)
			if err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
			vols[v.Name] = volume{path: p, readOnly: v.PersistentVolumeClaim.ReadOnly}
		default:
			return nil, fmt.Errorf("volume %s: podrun supports secret, configMap, emptyDir and persistentVolumeClaim volumes only", v.Name)
		}
	}
	return vols, nil
}

func (w *podWorker) secretData(ctx context.Context, src *corev1.SecretVolumeSource) (map[string][]byte, error) {
	s, err := w.r.cs.CoreV1().Secrets(w.namespace).Get(ctx, src.SecretName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && ptr.Deref(src.Optional, false) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return s.Data, nil
}

func (w *podWorker) configMapData(ctx context.Context, src *corev1.ConfigMapVolumeSource) (map[string][]byte, error) {
	cm, err := w.r.cs.CoreV1().ConfigMaps(w.namespace).Get(ctx, src.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && ptr.Deref(src.Optional, false) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return data, nil
}

// writeFiles writes data into dir (replacing what was there) as the
// kubelet's secret and configMap volumes show it: every key, or only the
// items asked for at their paths, with the item's mode, else defaultMode,
// else 0644 (corev1.SecretVolumeSourceDefaultMode).
func writeFiles(dir string, data map[string][]byte, items []corev1.KeyToPath, defaultMode *int32) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	mode := os.FileMode(ptr.Deref(defaultMode, corev1.SecretVolumeSourceDefaultMode))
	type file struct {
		path string
		mode os.FileMode
		data []byte
	}
	var files []file
	if len(items) == 0 {
		for _, k := range sortedKeys(data) {
			files = append(files, file{k, mode, data[k]})
		}
	} else {
		for _, it := range items {
			b, ok := data[it.Key]
			if !ok {
				return fmt.Errorf("no key %s", it.Key)
			}
			m := mode
			if it.Mode != nil {
				m = os.FileMode(*it.Mode)
			}
			files = append(files, file{it.Path, m, b})
		}
	}
	for _, f := range files {
		p := filepath.Join(dir, filepath.Clean("/"+f.path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, f.data, 0o600); err != nil {
			return err
		}
		// WriteFile's mode is subject to the umask; the volume's is not.
		if err := os.Chmod(p, f.mode&os.ModePerm); err != nil {
			return err
		}
	}
	return nil
}

// claimPath is where claim namespace/name is on this machine: the path
// Options.Claims gives it, else the hostPath of the PersistentVolume it is
// bound to, which is what the kubelet mounts for a hostPath volume
// (kubernetes v1.37.2 pkg/volume/hostpath/host_path.go: the mounter's path
// is the volume source's path). A claim that is not bound yet, or whose
// volume is of another kind, is an error that leaves the pod Pending, as
// the kubelet's volume manager waits for a volume it cannot attach.
func (w *podWorker) claimPath(ctx context.Context, namespace, name string) (string, error) {
	if p, ok := w.r.opts.Claims[namespace+"/"+name]; ok {
		return p, nil
	}
	if p, ok := w.r.opts.Claims[name]; ok {
		return p, nil
	}
	pvc, err := w.r.cs.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("claim %s/%s: %w", namespace, name, err)
	}
	if pvc.Spec.VolumeName == "" || pvc.Status.Phase != corev1.ClaimBound {
		return "", fmt.Errorf("claim %s/%s is not bound to a volume yet (phase %q)", namespace, name, pvc.Status.Phase)
	}
	pv, err := w.r.cs.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("claim %s/%s: volume %s: %w", namespace, name, pvc.Spec.VolumeName, err)
	}
	if ref := pv.Spec.ClaimRef; ref == nil || ref.Namespace != namespace || ref.Name != name || (ref.UID != "" && ref.UID != pvc.UID) {
		return "", fmt.Errorf("claim %s/%s: volume %s is bound to another claim", namespace, name, pv.Name)
	}
	if pv.Spec.HostPath == nil {
		return "", fmt.Errorf("claim %s/%s: volume %s is not a hostPath volume, the only kind podrun mounts, nor in podrun Options.Claims", namespace, name, pv.Name)
	}
	return pv.Spec.HostPath.Path, nil
}
