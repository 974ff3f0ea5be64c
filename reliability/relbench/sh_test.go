package relbench_test

import (
	"os"
	"testing"

	"github.com/softrnic/softrnic/reliability/relbench"
)

func TestSH(t *testing.T) {
	_, err := relbench.ReportShallow(os.Stdout, relbench.ShallowConfig{})
	t.Log(err)
}
