package jupyter

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A gateway behind TLS with a private CA and an auth proxy that wants a
// header of its own: the CA file and the extra headers reach it;
// InsecureSkipVerify does too, without the CA.
func TestTLSAndHeaders(t *testing.T) {
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
