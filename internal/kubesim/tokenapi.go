package kubesim

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	uploadv1beta1 "kubevirt.io/containerized-data-importer-api/pkg/apis/upload/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Where the upload token API is registered, as CDI registers it.
const (
	// APIServiceName is the APIService the sim creates.
	APIServiceName = "v1beta1.upload.cdi.kubevirt.io"
	// CDINamespace holds the Service behind the APIService.
	CDINamespace = "cdi"
	// APIServiceServiceName is the ExternalName Service (pointing at
	// localhost) behind the APIService.
	APIServiceServiceName = "cdi-api"
	// FrontProxyClientName is the common name the API server's front-proxy
	// client certificate must have (--requestheader-allowed-names).
	FrontProxyClientName = "front-proxy-client"
)

var apiServiceGVK = schema.GroupVersionKind{Group: "apiregistration.k8s.io", Version: "v1", Kind: "APIService"}

// tokenSigner issues and checks upload tokens: an HMAC-signed claim naming
// the namespace and PVC, valid for ttl. (CDI signs a JWT with a key only its
// API server and upload proxy know; the effect is the same.)
type tokenSigner struct {
	key []byte
	ttl time.Duration
}

type tokenClaims struct {
	Operation string `json:"op"`
	Namespace string `json:"ns"`
	Name      string `json:"name"`
	Resource  string `json:"resource"`
	Expires   int64  `json:"exp"`
	Nonce     string `json:"nonce"`
}

func newTokenSigner(ttl time.Duration) (*tokenSigner, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	return &tokenSigner{key: key, ttl: ttl}, nil
}

func (t *tokenSigner) issue(namespace, pvc string) (string, error) {
	nonce := make([]byte, 12)
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	b, err := json.Marshal(tokenClaims{
		Operation: "Upload", Namespace: namespace, Name: pvc, Resource: "persistentvolumeclaims",
		Expires: time.Now().Add(t.ttl).UnixMilli(), Nonce: base64.RawURLEncoding.EncodeToString(nonce),
	})
	if err != nil {
		return "", err
	}
	payload := base64.RawURLEncoding.EncodeToString(b)
	return payload + "." + base64.RawURLEncoding.EncodeToString(t.mac(payload)), nil
}

func (t *tokenSigner) mac(payload string) []byte {
	m := hmac.New(sha256.New, t.key)
	m.Write([]byte(payload))
	return m.Sum(nil)
}

var errBadToken = errors.New("invalid or expired upload token")

func (t *tokenSigner) validate(token string) (*tokenClaims, error) {
	payload, sig, ok := strings.Cut(token, ".")
	if !ok {
		return nil, errBadToken
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || subtle.ConstantTimeCompare(got, t.mac(payload)) != 1 {
		return nil, errBadToken
	}
	b, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return nil, errBadToken
	}
	var c tokenClaims
	if err := json.Unmarshal(b, &c); err != nil || time.Now().UnixMilli() > c.Expires {
		return nil, errBadToken
	}
	return &c, nil
}

// startTokenAPI serves upload.cdi.kubevirt.io/v1beta1 on a free port and
// registers it with the API server's aggregation layer.
func (s *Sim) startTokenAPI(ctx context.Context) error {
	pki, err := newServingPKI(APIServiceServiceName, []string{
		APIServiceServiceName + "." + CDINamespace + ".svc", "localhost",
	})
	if err != nil {
		return fmt.Errorf("kubesim: %w", err)
	}
	frontProxyCAs := x509.NewCertPool()
	if !frontProxyCAs.AppendCertsFromPEM(s.opts.FrontProxyCACertPEM) {
		return errors.New("kubesim: front-proxy CA certificate is not PEM")
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /apis", s.serveAPIGroupList)
	mux.HandleFunc("GET /apis/"+uploadv1beta1.SchemeGroupVersion.Group, s.serveAPIGroup)
	mux.HandleFunc("GET /apis/"+uploadv1beta1.SchemeGroupVersion.String(), s.serveAPIResourceList)
	mux.HandleFunc("POST /apis/"+uploadv1beta1.SchemeGroupVersion.String()+"/namespaces/{ns}/uploadtokenrequests", s.serveCreateToken)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeStatus(w, apierrors.NewNotFound(schema.GroupResource{}, r.URL.Path))
	})
	s.tokenAPI, err = s.serveTLS(frontProxyAuth(mux), func(srv *http.Server) {
		srv.TLSConfig = &tls.Config{
			Certificates: []tls.Certificate{pki.cert},
			// The API server presents its front-proxy client certificate;
			// anyone else gets no identity and is refused below.
			ClientAuth: tls.VerifyClientCertIfGiven,
			ClientCAs:  frontProxyCAs,
			MinVersion: tls.VersionTLS12,
		}
	})
	if err != nil {
		return err
	}
	if err := s.registerTokenAPI(ctx, pki.caPEM); err != nil {
		return err
	}
	return nil
}

// frontProxyAuth admits only requests proxied by the API server: a client
// certificate signed by the front-proxy CA with an allowed name, and the
// caller's identity in X-Remote-User (kube-apiserver has already
// authenticated and authorized the caller).
func frontProxyAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || r.TLS.VerifiedChains[0][0].Subject.CommonName != FrontProxyClientName {
			writeStatus(w, apierrors.NewUnauthorized("request did not come through the API server's front proxy"))
			return
		}
		if r.Header.Get("X-Remote-User") == "" {
			writeStatus(w, apierrors.NewUnauthorized("no X-Remote-User header from the front proxy"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeStatus(w http.ResponseWriter, err *apierrors.StatusError) {
	st := err.Status()
	st.Kind, st.APIVersion = "Status", "v1"
	writeJSON(w, int(st.Code), st)
}

func (s *Sim) serveAPIGroupList(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, &metav1.APIGroupList{
		TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"},
		Groups:   []metav1.APIGroup{uploadAPIGroup()},
	})
}

func (s *Sim) serveAPIGroup(w http.ResponseWriter, _ *http.Request) {
	g := uploadAPIGroup()
	g.TypeMeta = metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}
	writeJSON(w, http.StatusOK, &g)
}

func uploadAPIGroup() metav1.APIGroup {
	gv := metav1.GroupVersionForDiscovery{
		GroupVersion: uploadv1beta1.SchemeGroupVersion.String(),
		Version:      uploadv1beta1.SchemeGroupVersion.Version,
	}
	return metav1.APIGroup{Name: uploadv1beta1.SchemeGroupVersion.Group, Versions: []metav1.GroupVersionForDiscovery{gv}, PreferredVersion: gv}
}

func (s *Sim) serveAPIResourceList(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, &metav1.APIResourceList{
		TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
		GroupVersion: uploadv1beta1.SchemeGroupVersion.String(),
		APIResources: []metav1.APIResource{{
			Name: "uploadtokenrequests", SingularName: "uploadtokenrequest", Namespaced: true,
			Kind: "UploadTokenRequest", Verbs: metav1.Verbs{"create"},
		}},
	})
}

func (s *Sim) serveCreateToken(w http.ResponseWriter, r *http.Request) {
	ns := r.PathValue("ns")
	var req uploadv1beta1.UploadTokenRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
		writeStatus(w, apierrors.NewBadRequest("decoding UploadTokenRequest: "+err.Error()))
		return
	}
	if req.Spec.PvcName == "" {
		writeStatus(w, apierrors.NewInvalid(uploadv1beta1.Kind("UploadTokenRequest"), req.Name, nil))
		return
	}
	if req.Namespace != "" && req.Namespace != ns {
		writeStatus(w, apierrors.NewBadRequest("the namespace of the object does not match the namespace on the request"))
		return
	}
	token, err := s.tokens.issue(ns, req.Spec.PvcName)
	if err != nil {
		writeStatus(w, apierrors.NewInternalError(err))
		return
	}
	s.issuedMu.Lock()
	s.issued = append(s.issued, token)
	s.issuedMu.Unlock()
	req.TypeMeta = metav1.TypeMeta{Kind: "UploadTokenRequest", APIVersion: uploadv1beta1.SchemeGroupVersion.String()}
	req.Namespace = ns
	req.CreationTimestamp = metav1.Now()
	req.Status.Token = token
	writeJSON(w, http.StatusCreated, &req)
}

// IssuedUploadTokens returns every upload token the token API handed out,
// so that tests can check a secret the provider held never leaked.
func (s *Sim) IssuedUploadTokens() []string {
	s.issuedMu.Lock()
	defer s.issuedMu.Unlock()
	return append([]string(nil), s.issued...)
}

// registerTokenAPI creates (or takes over) the cdi namespace, the
// ExternalName Service and the APIService, and waits until the APIService
// is Available.
func (s *Sim) registerTokenAPI(ctx context.Context, caPEM []byte) error {
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: CDINamespace}}
	if err := s.cl.Create(ctx, nsObj); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kubesim: creating namespace %s: %w", CDINamespace, err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: CDINamespace, Name: APIServiceServiceName}}
	if err := upsert(ctx, s.cl, svc, func() {
		svc.Spec = corev1.ServiceSpec{
			Type: corev1.ServiceTypeExternalName,
			// Never a ClusterIP: with no kube-proxy, the API server would
			// send the requests off the machine.
			ExternalName: "localhost",
			Ports: []corev1.ServicePort{{
				Name: "https", Port: int32(s.tokenAPI.port), TargetPort: intstr.FromInt(s.tokenAPI.port),
			}},
		}
	}); err != nil {
		return fmt.Errorf("kubesim: Service %s/%s: %w", CDINamespace, APIServiceServiceName, err)
	}
	as := &unstructured.Unstructured{}
	as.SetGroupVersionKind(apiServiceGVK)
	as.SetName(APIServiceName)
	if err := upsert(ctx, s.cl, as, func() {
		as.Object["spec"] = map[string]any{
			"group":                uploadv1beta1.SchemeGroupVersion.Group,
			"version":              uploadv1beta1.SchemeGroupVersion.Version,
			"groupPriorityMinimum": int64(1000),
			"versionPriority":      int64(15),
			"caBundle":             base64.StdEncoding.EncodeToString(caPEM),
			"service": map[string]any{
				"namespace": CDINamespace,
				"name":      APIServiceServiceName,
				"port":      int64(s.tokenAPI.port),
			},
		}
		delete(as.Object, "status")
	}); err != nil {
		return fmt.Errorf("kubesim: APIService %s: %w", APIServiceName, err)
	}
	return s.waitAPIServiceAvailable(ctx)
}

// upsert creates obj, or updates the existing one, after mutate. Sims
// started side by side on one cluster race for the same objects: a
// create that finds the object made meanwhile, or an update that lost to
// another, is tried again on what is there now.
func upsert(ctx context.Context, cl client.Client, obj client.Object, mutate func()) error {
	var err error
	for range 5 {
		if err = upsertOnce(ctx, cl, obj, mutate); !apierrors.IsAlreadyExists(err) && !apierrors.IsConflict(err) {
			return err
		}
	}
	return err
}

func upsertOnce(ctx context.Context, cl client.Client, obj client.Object, mutate func()) error {
	err := cl.Get(ctx, client.ObjectKeyFromObject(obj), obj)
	switch {
	case apierrors.IsNotFound(err):
		mutate()
		return cl.Create(ctx, obj)
	case err != nil:
		return err
	}
	mutate()
	return cl.Update(ctx, obj)
}

// APIServiceAvailable reports whether the upload APIService is Available,
// with its condition's reason and message.
func (s *Sim) APIServiceAvailable(ctx context.Context) (bool, string, error) {
	as := &unstructured.Unstructured{}
	as.SetGroupVersionKind(apiServiceGVK)
	if err := s.cl.Get(ctx, client.ObjectKey{Name: APIServiceName}, as); err != nil {
		return false, "", err
	}
	conds, _, _ := unstructured.NestedSlice(as.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Available" {
			return m["status"] == "True", fmt.Sprintf("%v: %v", m["reason"], m["message"]), nil
		}
	}
	return false, "no Available condition yet", nil
}

func (s *Sim) waitAPIServiceAvailable(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	last := ""
	for {
		ok, why, err := s.APIServiceAvailable(ctx)
		if ok {
			return nil
		}
		if err != nil {
			why = err.Error()
		}
		last = why
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubesim: APIService %s not Available (%s): %w", APIServiceName, last, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (s *Sim) unregisterTokenAPI(ctx context.Context) error {
	as := &unstructured.Unstructured{}
	as.SetGroupVersionKind(apiServiceGVK)
	as.SetName(APIServiceName)
	// Only ours: another sim may have taken the APIService over since.
	if err := s.cl.Get(ctx, client.ObjectKeyFromObject(as), as); err != nil {
		return client.IgnoreNotFound(ignoreUnreachable(err))
	}
	port, _, _ := unstructured.NestedInt64(as.Object, "spec", "service", "port")
	if int(port) != s.tokenAPI.port {
		return nil
	}
	err := s.cl.Delete(ctx, as)
	if err == nil {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: CDINamespace, Name: APIServiceServiceName}}
		err = s.cl.Delete(ctx, svc)
	}
	return client.IgnoreNotFound(ignoreUnreachable(err))
}

// ignoreUnreachable drops errors that only say the API server is not
// there (a test may stop the cluster before the sim).
func ignoreUnreachable(err error) error {
	if err == nil || apierrors.ReasonForError(err) != metav1.StatusReasonUnknown {
		return err
	}
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		return err
	}
	return nil
}
