package redlock

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/internal/quorum"
)

// unidentified is a master's identity whose server could not be asked:
// its verdict is what admit returns when INFO fails.
type unidentified struct{ verdict error }

func (u unidentified) Known() (string, error, bool)          { return "", u.verdict, true }
func (u unidentified) Admit(context.Context) (string, error) { return "", u.verdict }
func (u unidentified) Last() string                          { return "" }

// TestVerdictIsReportedAsIs: a master that agreed but could not be
// identified reports admit's error as it is. Only a call's own error is
// named in plain words (closedError): the verdict's connection error was
// the identification's, and its text says so.
func TestVerdictIsReportedAsIs(t *testing.T) {
	fs := fakes(1)
	c := newFakeClient(t, fs, nil)
	verdict := fmt.Errorf("identifying the server: %w", io.EOF)
	c.engine = quorum.New(quorum.Config{
		Quorum:        c.quorum,
		MasterTimeout: c.masterTimeout,
		DriftFactor:   c.driftFactor,
		Work:          &c.gate,
	}, []quorum.Master{{Client: c.nodes[0].client, Pipe: c.nodes[0].pipe, ID: unidentified{verdict}}})

	_, err := c.Acquire(context.Background(), "k", time.Second)
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	assert.False(t, qe.Masters[0].Agreed)
	assert.Same(t, verdict, qe.Masters[0].Err, "%v", qe.Masters[0].Err)
}
