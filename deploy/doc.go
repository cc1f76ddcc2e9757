// Package deploy holds what runs NZC's parties as services: one hardened
// systemd unit per binary in systemd/ (templates whose instance is the
// party's id), installed as docs/DEPLOY.md describes. Its tests check every
// unit with systemd-analyze.
package deploy
