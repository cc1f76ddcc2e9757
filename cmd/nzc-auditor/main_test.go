package main

import (
	"testing"

	"github.com/nzcfed/nzc/cmd/internal/clitest"
)

func TestBinary(t *testing.T) { clitest.CheckBinary(t, newRootCommand, "nzc-auditor") }
