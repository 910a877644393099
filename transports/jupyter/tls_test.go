package jupyter

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/transports/jupyter/jupytertest"
)

// A gateway behind TLS with a private CA and an auth proxy that wants a
// header of its own: the CA file and the extra headers reach it;
// InsecureSkipVerify does too, without the CA.
func TestTLSAndHeaders(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Proxy-Auth") != "secret" {
			writeJSON(w, http.StatusUnauthorized, map[string]string{"message": "the proxy wants X-Proxy-Auth"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"version": "3.2.3"})
	})
	mux.HandleFunc("GET /api/kernelspecs", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"default": "python3", "kernelspecs": map[string]any{}})
	})
	srv := httptest.NewTLSServer(mux)
	defer srv.Close()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	headers := map[string]string{"X-Proxy-Auth": "secret"}
	for name, tc := range map[string]struct {
		cfg  Config
		want string // in the error; "" for none
	}{
		"no CA":        {Config{Headers: headers}, "certificate"},
		"CA file":      {Config{Headers: headers, CAFile: caFile}, ""},
		"no header":    {Config{CAFile: caFile}, "401"},
		"skip verify":  {Config{Headers: headers, InsecureSkipVerify: true}, ""},
		"missing CA":   {Config{CAFile: filepath.Join(t.TempDir(), "none.pem")}, "jupyter CA file"},
		"cert, no key": {Config{CAFile: caFile, ClientCertFile: caFile}, "both the certificate and its key"},
		"CA not PEM":   {Config{CAFile: os.Args[0]}, "no PEM certificate"},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			tc.cfg.URL = srv.URL
			tr, err := New(ctx, tc.cfg)
			if err == nil {
				tr.Close()
			}
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("New: %v, want %q", err, tc.want)
			}
		})
	}
}

// A server that requires client certificates (mutual TLS): a TLS reverse
// proxy on 127.0.0.1 in front of a real Jupyter Server, verifying clients
// against a CA of its own. With ClientCertFile/ClientKeyFile the REST calls
// and the kernel's websocket get through and `1+1` runs; without a
// certificate, or with one of another CA, New fails saying why.
func TestClientCertificate(t *testing.T) {
	t.Parallel()
	srv := jupytertest.Shared(t)
	target, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	clientCA := newTestCA(t, "kernelhost test client CA")
	proxy := httptest.NewUnstartedServer(httputil.NewSingleHostReverseProxy(target))
	proxy.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clientCA.pool()}
	proxy.StartTLS()
	defer proxy.Close()
	dir := t.TempDir()
	serverCA := filepath.Join(dir, "server-ca.pem")
	if err := os.WriteFile(serverCA, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: proxy.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, key := clientCA.issue(t, dir, "client")
	otherCert, otherKey := newTestCA(t, "another CA").issue(t, dir, "other")
	base := Config{URL: proxy.URL + "/", Token: srv.Token, CAFile: serverCA}

	t.Run("WithCertificate", func(t *testing.T) {
		tr := connect(t, base, func(c *Config) { c.ClientCertFile, c.ClientKeyFile = cert, key })
		k := startKernel(t, tr)
		if r := run(t, k, "print(1 + 1)"); r.stdout.String() != "2\n" {
			t.Fatalf("1+1 through the mutual-TLS proxy: stdout %q", r.stdout.String())
		}
	})
	for name, files := range map[string][2]string{"NoCertificate": {"", ""}, "AnotherCA": {otherCert, otherKey}} {
		t.Run(name, func(t *testing.T) {
			cfg := base
			cfg.ClientCertFile, cfg.ClientKeyFile = files[0], files[1]
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			tr, err := New(ctx, cfg)
			if err == nil {
				tr.Close()
				t.Fatal("New succeeded without a certificate the server accepts")
			}
			if !strings.Contains(err.Error(), "certificate") {
				t.Fatalf("New: %v, want an error about the certificate", err)
			}
		})
	}
}

// testCA is a throwaway certificate authority for TLS tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key}
}

func (ca *testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// issue writes a client certificate signed by ca and its key into dir, as
// PEM files, and returns their paths.
func (ca *testCA) issue(t *testing.T, dir, name string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
