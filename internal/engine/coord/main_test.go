package coord

import (
	"os"
	"sync"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/testcluster"
)

var cluster testcluster.Shared

func TestMain(m *testing.M) { os.Exit(cluster.Main(m)) }

// newNamespace returns a client of the shared test cluster and a new
// namespace in it.
func newNamespace(t *testing.T, name string) (*kube.Client, string) {
	t.Helper()
	c := kube.NewForRESTConfig(cluster.Get(t).RESTConfig())
	if err := c.CreateNamespace(t.Context(), name, map[string]string{kube.LabelManagedBy: kube.ManagedByValue}); err != nil {
		t.Fatal(err)
	}
	return c, name
}

// clock is a settable time for leases and claims.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Now().UTC().Truncate(time.Second)} }

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) add(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.t = c.t.Add(d) }
