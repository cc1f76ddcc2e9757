package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nzcfed/nzc/cmd/internal/clitest"
)

func TestBinary(t *testing.T) { clitest.CheckBinary(t, newRootCommand, "nzc-student") }

func TestLabelNeedsData(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.yaml")
	cfg := "id: student-1\ntls: {ca: ca.pem, cert: s.pem, key: s.key}\nage_identity: s.age\nhospitals: [age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p]\nauditor_keys: [a1+f853fd16+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop]\n"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := clitest.Execute(t, newRootCommand(), "label", "--config", path)
	if err == nil || !strings.Contains(err.Error(), "--data") {
		t.Fatalf("label without --data: %v", err)
	}
}
