package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// binDir is where the units expect the binaries.
const binDir = "/usr/local/bin/"

// units returns the unit files of systemd/, by name.
func units(t *testing.T) map[string]string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("systemd", "*"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no units in systemd/: %v", err)
	}
	out := map[string]string{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(p)] = string(b)
	}
	return out
}

// systemdAnalyze returns the path of systemd-analyze, or skips the test
// when it is absent and NZC_REQUIRE_SYSTEMD is unset.
func systemdAnalyze(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("NZC_REQUIRE_SYSTEMD") != "" {
			t.Fatalf("NZC_REQUIRE_SYSTEMD is set but systemd-analyze is missing (%v): run scripts/setup.sh, which installs the Debian package systemd", err)
		}
		t.Skipf("systemd-analyze is not installed, so the units are not verified (Debian: apt-get install systemd, or run scripts/setup.sh; NZC_REQUIRE_SYSTEMD=1 makes this a failure): %v", err)
	}
	return p
}

var execLine = regexp.MustCompile(`(?m)^Exec\w*=(\S+)`)

// TestUnitsVerify runs systemd-analyze verify on every unit, instantiated,
// with its binaries in place, and requires silence: verify exits 0 even on
// unknown keys and unparsable values, which it only reports.
func TestUnitsVerify(t *testing.T) {
	analyze := systemdAnalyze(t)
	root := t.TempDir()
	bin, dir := filepath.Join(root, "bin"), filepath.Join(root, "units")
	for _, d := range []string{bin, dir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// verify checks that each command is an executable file; the test's
	// own binary stands in for the party binaries, which
	// TestUnitsRunTheBinaries checks by name.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for name, text := range units(t) {
		for _, m := range execLine.FindAllStringSubmatch(text, -1) {
			if b, ok := strings.CutPrefix(m[1], binDir); ok {
				link := filepath.Join(bin, b)
				if _, err := os.Lstat(link); err != nil {
					if err := os.Symlink(self, link); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		inst := strings.Replace(name, "@.", "@auditor-1.", 1)
		p := filepath.Join(dir, inst)
		if err := os.WriteFile(p, []byte(strings.ReplaceAll(text, binDir, bin+"/")), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	cmd := exec.Command(analyze, append([]string{"verify"}, files...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	// Every service is hardened: exposure at most 2.0 of 10 ("OK"); --threshold counts in tenths.
	for _, f := range files {
		if !strings.HasSuffix(f, ".service") {
			continue
		}
		cmd := exec.Command(analyze, "security", "--offline=yes", "--threshold=20", filepath.Base(f))
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: systemd-analyze security exposure above 2.0: %v\n%s", filepath.Base(f), err, out)
		}
	}
}

// TestUnitsRunTheBinaries: each unit starts a binary this module builds,
// from /usr/local/bin, as a dedicated user, confined as the deployment
// guide promises.
func TestUnitsRunTheBinaries(t *testing.T) {
	for name, text := range units(t) {
		if !strings.HasSuffix(name, ".service") {
			continue
		}
		t.Run(name, func(t *testing.T) {
			m := execLine.FindAllStringSubmatch(text, -1)
			if len(m) == 0 {
				t.Fatal("no Exec line")
			}
			started := false
			for _, e := range m {
				b, ok := strings.CutPrefix(e[1], binDir)
				if !ok {
					continue
				}
				started = true
				if _, err := os.Stat(filepath.Join("..", "cmd", b, "main.go")); err != nil {
					t.Errorf("runs %s, which is not a binary of cmd/: %v", e[1], err)
				}
			}
			if !started {
				t.Error("starts no binary of this module")
			}
			for _, want := range []string{"User=nzc-", "StateDirectory=nzc-", "ProtectSystem=strict", "ProtectHome=yes",
				"NoNewPrivileges=yes", "PrivateTmp=yes", "CapabilityBoundingSet=\n", "SystemCallFilter=@system-service", "UMask=0077", "MemoryMax="} {
				if !strings.Contains(text, want) {
					t.Errorf("lacks %q", strings.TrimSpace(want))
				}
			}
			if strings.Contains(text, "User=root") || strings.Contains(text, "DynamicUser=") {
				t.Error("does not run as its dedicated user")
			}
		})
	}
}
