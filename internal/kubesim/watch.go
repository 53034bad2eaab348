package kubesim

import (
	"net/http"
	"net/url"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/testcluster"
)

// The controllers are driven as the real ones are, by watches: CDI's and
// KubeVirt's controllers run on shared informers
// (kubevirt.io/containerized-data-importer v1.65 pkg/controller/datavolume
// controller-base.go, kubevirt v1.7 pkg/virt-controller/watch) and
// reconcile when an object they watch changes, or when a requeue they
// asked for is due. The sim watches what its passes read and runs a pass
// on every change, at the time a timed step it saw falls due (due), and
// otherwise every Options.Resync. A pass still reads the API server,
// rather than a cache, so that what it acts on is never older than the
// event that woke it.

// minPassGap is the least time between two passes: a pass whose own writes
// wake it again does not spin.
const minPassGap = 5 * time.Millisecond

// watchRetry is how long a watch that failed or ended waits before it is
// opened again (the API server restarting, in the fault tests).
const watchRetry = 200 * time.Millisecond

// watchedLists are the kinds whose changes wake the controllers: the
// objects the passes list.
func watchedLists() []func() client.ObjectList {
	return []func() client.ObjectList{
		func() client.ObjectList { return &cdiv1.DataVolumeList{} },
		func() client.ObjectList { return &kubevirtv1.VirtualMachineList{} },
		func() client.ObjectList { return &kubevirtv1.VirtualMachineInstanceList{} },
		func() client.ObjectList { return &corev1.PersistentVolumeClaimList{} },
		func() client.ObjectList { return &corev1.PodList{} },
	}
}

// startWatches opens the watches that wake the controllers: each kind in
// each namespace of Options.Namespaces (all namespaces when empty), and
// the cluster's PersistentVolumes. They end with the sim.
func (s *Sim) startWatches(cfg *rest.Config) error {
	wcfg := rest.CopyConfig(cfg)
	// A watch is a long request: no client timeout, and a transport of
	// its own that Stop closes.
	wcfg.Timeout = 0
	wcfg.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
	hc, err := rest.HTTPClientFor(wcfg)
	if err != nil {
		return err
	}
	s.watchHC = hc
	wc, err := client.NewWithWatch(wcfg, client.Options{Scheme: testcluster.Scheme(), HTTPClient: hc})
	if err != nil {
		return err
	}
	namespaces := s.opts.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{""}
	}
	for _, list := range watchedLists() {
		for _, ns := range namespaces {
			s.wg.Add(1)
			go s.watchLoop(wc, list, ns)
		}
	}
	s.wg.Add(1)
	go s.watchLoop(wc, func() client.ObjectList { return &corev1.PersistentVolumeList{} }, "")
	return nil
}

// watchLoop keeps one watch open, waking the controllers on every event,
// and opens it again when it ends.
func (s *Sim) watchLoop(wc client.WithWatch, list func() client.ObjectList, namespace string) {
	defer s.wg.Done()
	var opts []client.ListOption
	if namespace != "" {
		opts = append(opts, client.InNamespace(namespace))
	}
	for s.ctx.Err() == nil {
		w, err := wc.Watch(s.ctx, list(), opts...)
		if err == nil {
			// Opening it may have missed changes since the last one ended.
			s.poke()
			for ev := range w.ResultChan() {
				if ev.Type == watch.Error {
					break
				}
				s.poke()
			}
			w.Stop()
		}
		select {
		case <-s.ctx.Done():
		case <-time.After(watchRetry):
		}
	}
}

// due reports whether d has passed since the object with uid entered
// phase, as this sim observed it; if not, the controllers run a pass when
// it has. Timing is the only state kept in memory: after a sim restart
// the phase counts from when the new sim first sees it.
func (s *Sim) due(uid types.UID, phase string, d time.Duration) bool {
	k := string(uid) + "/" + phase
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.entered[k]
	if !ok {
		s.entered[k] = now
		t = now
	}
	at := t.Add(d)
	if !now.Before(at) {
		return true
	}
	if s.wakeAt.IsZero() || at.Before(s.wakeAt) {
		s.wakeAt = at
	}
	return false
}

// nextPass is how long the controllers wait after a pass, unless woken:
// until the earliest timed step the pass saw, at most Options.Resync.
func (s *Sim) nextPass() time.Duration {
	s.mu.Lock()
	at := s.wakeAt
	s.wakeAt = time.Time{}
	s.mu.Unlock()
	wait := s.opts.Resync
	if !at.IsZero() {
		wait = min(wait, time.Until(at))
	}
	return max(wait, minPassGap)
}
