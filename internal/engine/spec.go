package engine

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"time"
	// Time zone names are checked the same way on every machine.
	_ "time/tzdata"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/preflight"
)

// Allowed values of the Spec's enumerated fields. The provider's validators
// and documentation use the same slices.
var (
	AccessModes    = []string{"ReadWriteOnce", "ReadWriteMany", "ReadOnlyMany", "ReadWriteOncePod"}
	VolumeModes    = []string{"Filesystem", "Block"}
	DiskBuses      = []string{"virtio", "sata", "scsi"}
	NICModels      = []string{"virtio", "e1000e", "e1000"}
	Conversions    = []string{ConversionVirtV2V, ConversionNone}
	RunStrategies  = []string{"Always", "Halted", "Manual", "RerunOnFailure"}
	TargetFormats  = []string{"raw", "qcow2"}
	TransportKinds = []string{TransportCDIUpload, TransportHTTP}
	PodBindings    = []string{"masquerade", "bridge"}
	// PowerOffPolicies are the source power-off policies (see package
	// preflight, whose checks judge them).
	PowerOffPolicies = preflight.PowerOffPolicies
)

// Power-off policies, as the resource names them.
const (
	PolicyGraceful         = preflight.PolicyGraceful
	PolicyGracefulThenHard = preflight.PolicyGracefulThenHard
	PolicyHard             = preflight.PolicyHard
	PolicyManual           = preflight.PolicyManual
)

// Transport kinds.
const (
	// TransportCDIUpload uploads each disk through CDI's upload proxy
	// (DataVolume source "upload").
	TransportCDIUpload = "cdi_upload"
	// TransportHTTP puts each artifact in Transport.StagingDir, which the
	// user's HTTP server serves at Transport.StagingURL, and lets CDI import
	// it (DataVolume source "http").
	TransportHTTP = "http"
)

// Guest conversions.
const (
	// ConversionVirtV2V converts the guest with virt-v2v so that it boots
	// on KubeVirt's virtio devices (drivers, initramfs, fstab, bootloader,
	// VMware Tools removed).
	ConversionVirtV2V = "virt-v2v"
	// ConversionNone imports the disks as copied; the VM then gets devices
	// a guest without virtio drivers can usually drive (sata, e1000e).
	ConversionNone = "none"
)

// Devices a guest is given by default: virtio after a conversion, else
// what unconverted guests usually have drivers for.
const (
	ConvertedDiskBus    = "virtio"
	ConvertedNICModel   = "virtio"
	UnconvertedDiskBus  = "sata"
	UnconvertedNICModel = "e1000e"
)

// Defaults applied by Spec.WithDefaults.
const (
	DefaultAccessMode        = "ReadWriteOnce"
	DefaultVolumeMode        = "Filesystem"
	DefaultConversion        = ConversionVirtV2V
	DefaultTimezone          = "UTC"
	DefaultRunStrategy       = "Always"
	DefaultTargetFormat      = "raw"
	DefaultPowerOffPolicy    = preflight.PolicyGraceful
	DefaultShutdownTimeout   = 5 * time.Minute
	DefaultStartTimeout      = 10 * time.Minute
	DefaultValidationTimeout = 10 * time.Minute
	DefaultRetryAttempts     = 5
	DefaultRetryInitial      = 10 * time.Second
	DefaultRetryMax          = 5 * time.Minute
	DefaultPodBinding        = "masquerade"
)

// Spec is what the user asked for: which VM to move, where to, and how.
// The identity fields (Host, VMName/VMID, Namespace, Name) cannot change
// for an existing migration.
type Spec struct {
	// Host is the ESXi host's name in the esxi.Registry.
	Host string
	// VMName selects the source VM by display name; VMID by vmid. Exactly
	// one is needed (VMID wins when both are set and must then match).
	VMName string
	VMID   int

	// Namespace and Name are the destination; Name is the VirtualMachine's
	// name, its DataVolumes are preflight.DiskName(Name, n), and the
	// migration's record and lease are "vmmigration-<Name>".
	Namespace string
	Name      string

	StorageClass string
	// AccessMode of the disks' claims (default ReadWriteOnce).
	AccessMode string
	// VolumeMode is Filesystem (default) or Block.
	VolumeMode string
	// Conversion is ConversionVirtV2V (default) or ConversionNone.
	Conversion string
	// DiskBus of every disk: virtio, sata or scsi; by default
	// DefaultDiskBus(Conversion).
	DiskBus string
	// NICModel of every network interface: virtio, e1000e or e1000; by
	// default DefaultNICModel(Conversion).
	NICModel string
	// Timezone is the time zone of a Windows guest's clock, which Windows
	// keeps in local time (DefaultTimezone when empty); Linux guests'
	// clocks are UTC.
	Timezone string
	// NetworkMap maps each source network name to "pod" or a Multus
	// network "<namespace>/<name>" (or "<name>").
	NetworkMap map[string]string
	// PodBinding is how a NIC attaches to the pod network: masquerade
	// (default) or bridge.
	PodBinding string
	// RunStrategy of the VirtualMachine once imported: Always (default),
	// Halted, Manual or RerunOnFailure. Halted and Manual leave it stopped.
	RunStrategy string
	// Labels are added to the VirtualMachine and DataVolumes.
	Labels map[string]string

	// Mode is ModeCold (default: the source is powered off, then copied)
	// or ModeWarm (copied while it runs, from migration snapshots, and
	// powered off only for the last delta; see prepare_warm.go). PrecopyRounds is
	// the number of snapshots a warm migration takes (default 1).
	Mode          string
	PrecopyRounds int
	// PrecopyStopBytes ends the precopy before PrecopyRounds once a round
	// (the second or later) copied at most this many bytes; 0 (the zero
	// value) takes every round. See prepare_warm.go.
	PrecopyStopBytes int64

	// PowerOffPolicy is one of preflight.PowerOffPolicies (default
	// graceful); ShutdownTimeout bounds a graceful shutdown.
	PowerOffPolicy  string
	ShutdownTimeout time.Duration

	// TargetFormat of the imported images: raw (default) or qcow2.
	TargetFormat string
	Transport    Transport
	Validation   Validation
	// StartTimeout bounds waiting for the VMI to run, per attempt.
	StartTimeout time.Duration
	// DataVolumeStallTimeout bounds waiting on a DataVolume that shows no
	// change (DefaultDataVolumeStallTimeout); ImporterRestarts is how many
	// importer restarts CDI may make for one DataVolume before the engine
	// stops (DefaultImporterRestarts; CDI restarts it forever).
	DataVolumeStallTimeout time.Duration
	ImporterRestarts       int
	Retry                  RetryPolicy

	// Execution is where the disk work runs: ExecutionLocal (default) or
	// ExecutionCluster (see execution.go). The record fixes it at
	// Validated.
	Execution string

	// WorkDir holds the staged disk copies, under <WorkDir>/<ns>/<name>/.
	WorkDir string
	// CopyChunkSize is the unit of copying and resumption (a multiple of
	// 1 MiB; transfer.DefaultChunkSize when 0).
	CopyChunkSize int64
}

// Transport says how images reach CDI.
type Transport struct {
	// Kind is TransportCDIUpload (default) or TransportHTTP.
	Kind string
	// UploadProxyURL is CDI's upload proxy (cdi_upload); UploadProxyCAPEM
	// verifies its certificate, or Insecure skips that (lab use only).
	UploadProxyURL   string
	UploadProxyCAPEM string
	Insecure         bool
	// UploadProxyServerName, when set, is the name the proxy's certificate
	// is checked against, for a URL whose host it does not name (a
	// port-forward, a NodePort, an IP address).
	UploadProxyServerName string
	// StagingDir is where the http transport writes the artifacts; the
	// user's HTTP server serves it at StagingURL.
	StagingDir string
	StagingURL string
	// StagingCAPEM is the PEM CA that signed the HTTPS staging server's
	// certificate, where no CA CDI's importer trusts did: the engine keeps
	// it in a ConfigMap of the migration's (StagingCAConfigMapName) and
	// names it in each DataVolume's http.certConfigMap.
	StagingCAPEM string
}

// Validation lists the read-only checks of the Validating phase. A running
// VMI is always checked (unless the run strategy leaves the VM stopped).
type Validation struct {
	// GuestAgent waits for the VMI's AgentConnected condition.
	GuestAgent bool
	// IPReported waits for an IP address in the VMI's status.interfaces.
	IPReported bool
	// TCP lists host:port addresses that must accept a connection.
	TCP []string
	// HTTP lists URLs that must answer GET with a 2xx status.
	HTTP []string
	// Timeout bounds all checks together (DefaultValidationTimeout).
	Timeout time.Duration
}

// RetryPolicy bounds the automatic retries of one phase.
type RetryPolicy struct {
	// Attempts is the total number of tries of a phase (default 5).
	Attempts int
	// Initial is the first backoff, doubled per retry up to Max.
	Initial, Max time.Duration
}

// WithDefaults returns s with every unset optional field defaulted.
func (s Spec) WithDefaults() Spec {
	def := func(p *string, v string) {
		if *p == "" {
			*p = v
		}
	}
	def(&s.AccessMode, DefaultAccessMode)
	def(&s.VolumeMode, DefaultVolumeMode)
	def(&s.Conversion, DefaultConversion)
	def(&s.DiskBus, DefaultDiskBus(s.Conversion))
	def(&s.NICModel, DefaultNICModel(s.Conversion))
	def(&s.RunStrategy, DefaultRunStrategy)
	def(&s.TargetFormat, DefaultTargetFormat)
	// No transport configured: CDI's upload proxy, at the URL the cluster
	// publishes.
	def(&s.Transport.Kind, TransportCDIUpload)
	def(&s.PowerOffPolicy, DefaultPowerOffPolicy)
	def(&s.PodBinding, DefaultPodBinding)
	def(&s.Timezone, DefaultTimezone)
	def(&s.Mode, ModeCold)
	def(&s.Execution, DefaultExecution)
	if s.PrecopyRounds == 0 {
		s.PrecopyRounds = DefaultPrecopyRounds
	}
	dur := func(p *time.Duration, v time.Duration) {
		if *p <= 0 {
			*p = v
		}
	}
	dur(&s.ShutdownTimeout, DefaultShutdownTimeout)
	dur(&s.StartTimeout, DefaultStartTimeout)
	dur(&s.DataVolumeStallTimeout, DefaultDataVolumeStallTimeout)
	if s.ImporterRestarts <= 0 {
		s.ImporterRestarts = DefaultImporterRestarts
	}
	dur(&s.Validation.Timeout, DefaultValidationTimeout)
	dur(&s.Retry.Initial, DefaultRetryInitial)
	dur(&s.Retry.Max, DefaultRetryMax)
	if s.Retry.Attempts <= 0 {
		s.Retry.Attempts = DefaultRetryAttempts
	}
	return s
}

// Validate checks a defaulted Spec without contacting anything. Every
// problem is tied to the attribute to fix (see FieldProblems).
func (s Spec) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, onField(field, fmt.Errorf(format, args...)))
	}
	oneOf := func(field, v string, allowed []string) {
		if !slices.Contains(allowed, v) {
			bad(field, "%s %q is not one of %s", field, v, strings.Join(allowed, ", "))
		}
	}
	if s.Host == "" {
		bad(FieldSourceHost, "source.host is required")
	}
	if s.VMName == "" && s.VMID <= 0 {
		bad(FieldSource, "the source VM is required: set source.vm_name or source.vmid")
	}
	if s.Namespace == "" {
		bad(FieldNamespace, "destination.namespace is required")
	}
	if s.Name == "" {
		bad(FieldName, "destination.name is required")
	}
	if s.StorageClass == "" {
		bad(FieldStorageClass, "destination.storage_class is required")
	}
	oneOf(FieldAccessMode, s.AccessMode, AccessModes)
	oneOf(FieldVolumeMode, s.VolumeMode, VolumeModes)
	oneOf(FieldConversion, s.Conversion, Conversions)
	oneOf(FieldDiskBus, s.DiskBus, DiskBuses)
	oneOf(FieldNICModel, s.NICModel, NICModels)
	if _, err := time.LoadLocation(s.Timezone); err != nil || s.Timezone == "" || strings.EqualFold(s.Timezone, "local") {
		bad(FieldTimezone, "destination.timezone %q is not a time zone name such as \"Europe/Berlin\" or \"UTC\"", s.Timezone)
	}
	oneOf(FieldRunStrategy, s.RunStrategy, RunStrategies)
	oneOf(FieldTargetFormat, s.TargetFormat, TargetFormats)
	oneOf(FieldPowerOffPolicy, s.PowerOffPolicy, PowerOffPolicies)
	oneOf(FieldExecution, s.Execution, Executions)
	oneOf("", s.PodBinding, PodBindings)
	if s.WorkDir == "" || !filepath.IsAbs(s.WorkDir) {
		bad("", "the provider's work_dir must be an absolute path")
	}
	if s.CopyChunkSize < 0 || s.CopyChunkSize%(1<<20) != 0 {
		bad("", "copy chunk size must be a multiple of 1 MiB")
	}
	errs = append(errs, s.Transport.validate(), s.validateWarm())
	for src, dst := range s.NetworkMap {
		if err := ValidateNetwork(dst); err != nil {
			bad(FieldNetworkMap, "destination.network_map[%q]: %v", src, err)
		}
	}
	for _, a := range s.Validation.TCP {
		if _, _, err := net.SplitHostPort(a); err != nil {
			bad(FieldValidationTCP, "validation.tcp %q is not host:port", a)
		}
	}
	for _, h := range s.Validation.HTTP {
		if u, err := url.Parse(h); err != nil || (u.Scheme != "http" && u.Scheme != "https") {
			bad(FieldValidationHTTP, "validation.http %q is not an http(s) URL", h)
		}
	}
	return errors.Join(errs...)
}

// DefaultDiskBus is the disk bus a migration with conversion gets when
// the user names none: virtio for a converted guest, sata for one that is
// not converted (its drivers are unknown; AHCI is what most have).
func DefaultDiskBus(conversion string) string {
	if conversion == ConversionNone {
		return UnconvertedDiskBus
	}
	return ConvertedDiskBus
}

// DefaultNICModel is DefaultDiskBus's counterpart for network interfaces.
func DefaultNICModel(conversion string) string {
	if conversion == ConversionNone {
		return UnconvertedNICModel
	}
	return ConvertedNICModel
}

// ValidateNetwork checks a destination.network_map value: "pod" for the
// pod network, or a Multus NetworkAttachmentDefinition "<namespace>/<name>"
// (or "<name>" in the VM's namespace).
func ValidateNetwork(v string) error {
	if v == preflight.PodNetwork {
		return nil
	}
	ns, name, found := strings.Cut(v, "/")
	if !found {
		ns, name = "", v
	}
	if (found && len(validation.IsDNS1123Label(ns)) > 0) || len(validation.IsDNS1123Label(name)) > 0 {
		return fmt.Errorf("%q is neither %q (the pod network) nor a Multus NetworkAttachmentDefinition \"<namespace>/<name>\"", v, preflight.PodNetwork)
	}
	return nil
}

// TransportOf turns the transport attributes into a Transport: CDI's upload
// proxy when uploadProxyURL is set, else HTTP staging. Its problems (none
// set, both set, one half of the HTTP pair, malformed values) are those of
// Transport.validate, so configuration checks and Spec.Validate agree.
func TransportOf(uploadProxyURL, uploadProxyCA string, insecure bool, stagingDir, stagingURL string) (Transport, error) {
	var t Transport
	switch {
	case uploadProxyURL != "" && (stagingDir != "" || stagingURL != ""):
		return t, onField(FieldTransport, errors.New("set either transport.upload_proxy_url (CDI upload) or transport.http_staging_dir and transport.http_staging_url (HTTP import), not both"))
	case uploadProxyURL != "":
		t = Transport{Kind: TransportCDIUpload, UploadProxyURL: uploadProxyURL, UploadProxyCAPEM: uploadProxyCA, Insecure: insecure}
	case stagingDir != "" || stagingURL != "":
		t = Transport{Kind: TransportHTTP, StagingDir: stagingDir, StagingURL: stagingURL}
	default:
		// CDI's upload proxy, at the URL the cluster publishes.
		t = Transport{Kind: TransportCDIUpload, UploadProxyCAPEM: uploadProxyCA, Insecure: insecure}
	}
	return t, t.validate()
}

// validate checks a transport; an empty Kind means none was configured.
func (t Transport) validate() error {
	var errs []error
	bad := func(field, msg string) { errs = append(errs, onField(field, errors.New(msg))) }
	switch t.Kind {
	case "":
		bad(FieldTransport, "say how disk images reach CDI: set transport.upload_proxy_url to the URL of CDI's upload proxy "+
			"(see `kubectl get cdiconfig config -o jsonpath='{.status.uploadProxyURL}'`), or "+
			"transport.http_staging_dir and transport.http_staging_url for a staging location that your HTTP server serves")
	case TransportCDIUpload:
		if t.StagingCAPEM != "" {
			bad(FieldHTTPStagingCA, "transport.http_staging_ca_certificate goes with the http staging transport only")
		}
		// Without a URL, the one in CDIConfig's status.uploadProxyURL.
		if u, err := url.Parse(t.UploadProxyURL); t.UploadProxyURL != "" && (err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "") {
			bad(FieldUploadProxyURL, "transport.upload_proxy_url must be the URL of CDI's upload proxy, such as https://cdi-uploadproxy.example.com")
		}
	case TransportHTTP:
		if t.StagingDir == "" || !filepath.IsAbs(t.StagingDir) {
			bad(FieldHTTPStagingDir, "transport.http_staging_dir must be an absolute path (set it together with transport.http_staging_url)")
		}
		if u, err := url.Parse(t.StagingURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad(FieldHTTPStagingURL, "transport.http_staging_url must be an http(s) URL (set it together with transport.http_staging_dir)")
		}
		if t.StagingCAPEM != "" {
			if err := kube.CheckCertificatesPEM(t.StagingCAPEM); err != nil {
				bad(FieldHTTPStagingCA, "transport.http_staging_ca_certificate must be PEM certificates: "+err.Error())
			}
		}
	default:
		bad(FieldTransport, fmt.Sprintf("transport kind %q is not one of %s", t.Kind, strings.Join(TransportKinds, ", ")))
	}
	return errors.Join(errs...)
}

// startsVM reports whether the run strategy makes KubeVirt run the VM.
func (s Spec) startsVM() bool {
	return s.RunStrategy == "Always" || s.RunStrategy == "RerunOnFailure"
}

// stagingDir is this migration's folder of staged copies.
func (s Spec) stagingDir() string {
	return filepath.Join(s.WorkDir, s.Namespace, s.Name)
}

// stagedPath is where disk n is copied.
func (s Spec) stagedPath(n int) string {
	return filepath.Join(s.stagingDir(), fmt.Sprintf("disk-%d.raw", n))
}

// artifactPath is where disk n's converted image is written; token is the
// record's StagingToken (see httpFolder).
func (s Spec) artifactPath(n int, token string) string {
	if s.Transport.Kind == TransportHTTP && s.Conversion != ConversionVirtV2V {
		// Served as it is; a converted guest's image is served instead.
		return filepath.Join(s.httpFolder(token), fmt.Sprintf("disk-%d.%s", n, s.TargetFormat))
	}
	if s.TargetFormat == "raw" {
		// The staged copy is already the raw image: no second copy.
		return s.stagedPath(n)
	}
	return filepath.Join(s.stagingDir(), fmt.Sprintf("disk-%d.%s", n, s.TargetFormat))
}

// uploadPath is the qcow2 copy of disk n's raw image that is sent to CDI's
// upload proxy (cdi_upload transport), beside the staged copy.
func (s Spec) uploadPath(n int) string {
	return filepath.Join(s.stagingDir(), fmt.Sprintf("disk-%d.upload.qcow2", n))
}

// httpFolder is the folder of this migration's images under the http
// staging folder: <StagingDir>/<namespace>/<name>/<token>, token being the
// record's StagingToken ("" for migrations that started before tokens
// existed, whose images are in <name> itself).
func (s Spec) httpFolder(token string) string {
	d := filepath.Join(s.Transport.StagingDir, s.Namespace, s.Name)
	if token != "" {
		d = filepath.Join(d, token)
	}
	return d
}

// stagingFolders are this migration's local folders: its work folder and,
// with the http transport, its folder under the staging folder.
func (s Spec) stagingFolders() []string {
	roots := []string{s.WorkDir}
	if s.Transport.Kind == TransportHTTP {
		roots = append(roots, s.Transport.StagingDir)
	}
	return stagingFolders(s.Namespace, s.Name, roots...)
}

// imageURL is where CDI fetches disk n with the http transport; token is
// the record's StagingToken (see httpFolder).
func (s Spec) imageURL(n int, token string) string {
	u := strings.TrimRight(s.Transport.StagingURL, "/") + "/" + url.PathEscape(s.Namespace) + "/" + url.PathEscape(s.Name) + "/"
	if token != "" {
		u += token + "/"
	}
	return u + filepath.Base(s.imagePath(n, token))
}
