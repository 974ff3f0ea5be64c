package relbench_test

import (
	"os"
	"testing"
	"time"

	"github.com/softrnic/softrnic/reliability/relbench"
)

func TestRB(t *testing.T) {
	ok, err := relbench.Report(os.Stdout, relbench.Config{Duration: time.Second})
	t.Log(ok, err)
}
