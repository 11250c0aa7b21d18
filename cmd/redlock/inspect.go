package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/link"
)

// hooks is what package redlock lends this command: the keys of a lock.
var hooks = link.Get[*redlock.Client, *redlock.Lock]()

// MasterView is what one master stores for a lock. Durations are what is
// left of a key's TTL when the master answered, in milliseconds.
type MasterView struct {
	Master string `json:"master"`
	Error  string `json:"error,omitempty"` // the master did not answer; nothing else is set

	Owner string `json:"owner,omitempty"` // the exclusive, reentrant or write lock's holder
	Nonce string `json:"nonce,omitempty"` // which Lock of that owner
	Holds int    `json:"holds,omitempty"`
	Token string `json:"token,omitempty"`
	TTLms int64  `json:"ttl_ms,omitempty"`

	Fence      string `json:"fence,omitempty"` // the fencing counter
	FenceTTLms int64  `json:"fence_ttl_ms,omitempty"`

	Readers []ReaderView `json:"readers,omitempty"`

	WriteWait      string `json:"write_wait,omitempty"` // the writer that keeps new readers out
	WriteWaitTTLms int64  `json:"write_wait_ttl_ms,omitempty"`
}

// ReaderView is one read hold on one master.
type ReaderView struct {
	Owner string `json:"owner"`
	Nonce string `json:"nonce,omitempty"`
	TTLms int64  `json:"ttl_ms"`
}

// Holder is one owner's hold as a quorum sees it.
type Holder struct {
	Owner string `json:"owner"`
	Nonce string `json:"nonce,omitempty"`
	// Description is the holding client's redlock.Options.Holder, the
	// part of the nonce after its first space; empty if it had none.
	Description string `json:"description,omitempty"`
	// Token is the fencing token a majority of the hold's masters agree on
	// (see agreedToken); empty when none does.
	Token string `json:"token,omitempty"`
	// Tokens, set only when Token is empty, are the distinct tokens its
	// masters hold, in numeric order; a value that is not a uint64 last.
	Tokens  []string   `json:"tokens,omitempty"`
	Masters int        `json:"masters"`         // masters where the hold is live
	Held    bool       `json:"held"`            // on a quorum of them
	Until   *time.Time `json:"until,omitempty"` // held: when fewer than a quorum will hold it, at the latest; nil without expiry
}

// LockView is a lock across the masters.
type LockView struct {
	Key     string       `json:"key"`
	At      time.Time    `json:"at"` // when the masters were asked
	Quorum  int          `json:"quorum"`
	Masters []MasterView `json:"masters"`
	Writer  *Holder      `json:"writer,omitempty"` // exclusive, reentrant or write lock: the holder with the most masters
	Readers []Holder     `json:"readers,omitempty"`
}

// inspect reads the lock named key on every master in parallel, each
// bounded by timeout, and never fails: a master that did not answer has
// Error set.
func inspect(ctx context.Context, clients []*redis.Client, addrs []string, prefix, key string, timeout time.Duration) *LockView {
	keys := hooks.LockKeys(prefix, key, true)
	v := &LockView{Key: key, At: time.Now(), Quorum: len(clients)/2 + 1, Masters: make([]MasterView, len(clients))}
	var g errgroup.Group
	for i, c := range clients {
		g.Go(func() error {
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			m, err := readMaster(ctx, c, keys)
			if err != nil {
				m = MasterView{Error: err.Error()}
			}
			m.Master = addrs[i]
			v.Masters[i] = m
			return nil
		})
	}
	_ = g.Wait()
	v.Writer, v.Readers = quorumView(v)
	return v
}

// readMaster reads every key of a lock on one master in one pipeline.
func readMaster(ctx context.Context, c *redis.Client, keys []string) (MasterView, error) {
	main, readers, readerNonces, ww := keys[0], keys[1], keys[2], keys[3]
	p := c.Pipeline()
	lock, lockTTL := p.Get(ctx, main), p.PTTL(ctx, main)
	expiries, nonces := p.ZRangeWithScores(ctx, readers, 0, -1), p.HGetAll(ctx, readerNonces)
	wait, waitTTL := p.Get(ctx, ww), p.PTTL(ctx, ww)
	now := p.Time(ctx)
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		if redis.HasErrorPrefix(lock.Err(), "WRONGTYPE") {
			return MasterView{}, fmt.Errorf("%s is not a redlock lock of this version (not a string): %w", main, lock.Err())
		}
		return MasterView{}, err
	}
	m := MasterView{WriteWait: wait.Val()}
	if v := lock.Val(); v != "" {
		h, ok := link.ParseHolder(v)
		switch {
		case ok:
			m.Owner, m.Nonce, m.Token, m.Holds, m.TTLms = h.Owner, h.Nonce, h.Token, h.Holds, ms(lockTTL.Val())
			if h.Token != "0" { // the token is the counter while the lock is held
				m.Fence = h.Token
			}
		case strings.HasPrefix(v, "f:"): // released: the counter stays for the key's TTL
			m.Fence = v[2:]
		default:
			return MasterView{}, fmt.Errorf("%s is not a redlock lock: %q", main, v)
		}
	}
	if m.Fence != "" {
		m.FenceTTLms = ms(lockTTL.Val())
	}
	if m.WriteWait != "" {
		m.WriteWaitTTLms = ms(waitTTL.Val())
	}
	nowMs := now.Val().UnixMilli()
	for _, z := range expiries.Val() {
		owner, _ := z.Member.(string)
		if left := int64(z.Score) - nowMs; left > 0 { // expired readers are removed lazily
			m.Readers = append(m.Readers, ReaderView{Owner: owner, Nonce: nonces.Val()[owner], TTLms: left})
		}
	}
	return m, nil
}

// ms is a PTTL reply in milliseconds: -1 (no expiry) and -2 (no key) stay.
func ms(d time.Duration) int64 {
	if d < 0 {
		return int64(d)
	}
	return d.Milliseconds()
}

// quorumView groups the holds by owner and Lock, and says which a quorum
// holds and until when: the quorum-th longest TTL among its masters.
func quorumView(v *LockView) (writer *Holder, readers []Holder) {
	type id struct{ owner, nonce string }
	ttls := map[id][]int64{}
	tokens := map[id][]string{}
	var writers, reads []id
	for _, m := range v.Masters {
		if m.Owner != "" && m.TTLms != -2 {
			w := id{m.Owner, m.Nonce}
			if ttls[w] == nil {
				writers = append(writers, w)
			}
			ttls[w] = append(ttls[w], m.TTLms)
			tokens[w] = append(tokens[w], m.Token)
		}
		for _, r := range m.Readers {
			k := id{"reader " + r.Owner, r.Nonce}
			if ttls[k] == nil {
				reads = append(reads, k)
			}
			ttls[k] = append(ttls[k], r.TTLms)
		}
	}
	holder := func(k id, owner string) Holder {
		t := ttls[k]
		// Longest first; no expiry (-1) is the longest.
		rank := func(ms int64) int64 {
			if ms < 0 {
				return math.MaxInt64
			}
			return ms
		}
		slices.SortFunc(t, func(a, b int64) int { return cmp.Compare(rank(b), rank(a)) })
		h := Holder{Owner: owner, Masters: len(t), Held: len(t) >= v.Quorum}
		h.Nonce, h.Description, _ = strings.Cut(k.nonce, " ")
		h.Token, h.Tokens = agreedToken(tokens[k])
		if left := t[min(v.Quorum, len(t))-1]; h.Held && left >= 0 {
			until := v.At.Add(time.Duration(left) * time.Millisecond)
			h.Until = &until
		}
		return h
	}
	for _, w := range writers {
		h := holder(w, w.owner)
		if writer == nil || h.Masters > writer.Masters {
			writer = &h
		}
	}
	for _, r := range reads {
		readers = append(readers, holder(r, strings.TrimPrefix(r.owner, "reader ")))
	}
	return writer, readers
}

// agreedToken returns the token that more than half of a hold's masters
// hold, or "" and the distinct tokens when none does. That is the Lock's
// token unless masters failed since: the Lock takes the largest token of
// the quorum that granted it, and the fence round raises a quorum to it
// where they differ (see raiseFence in lock.go). Neither the largest nor
// the smallest token would do. A master where a repair set the lock again
// keeps its counter where that passed the token (see "repair" in
// scripts.lua). A master of the granting quorum that the fence round
// missed keeps a smaller token. A token that is not a uint64 in canonical
// decimal never counts as agreed.
func agreedToken(tokens []string) (token string, disputed []string) {
	count := map[string]int{}
	for _, tok := range tokens {
		if _, ok := parseToken(tok); ok {
			count[tok]++ // canonical text: equal text is equal value
		}
	}
	for tok, n := range count {
		if 2*n > len(tokens) {
			return tok, nil
		}
	}
	for _, tok := range tokens {
		if !slices.Contains(disputed, tok) {
			disputed = append(disputed, tok)
		}
	}
	slices.SortFunc(disputed, func(a, b string) int {
		x, okA := parseToken(a)
		y, okB := parseToken(b)
		switch {
		case okA && okB:
			return cmp.Compare(x, y)
		case okA != okB: // a valid token first
			if okA {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	return "", disputed
}

// parseToken reads a token stored on a master: a uint64 in canonical
// decimal. ok is false for anything else (a leading zero, a sign, too
// large), which no redlock script writes.
func parseToken(s string) (n uint64, ok bool) {
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil && strconv.FormatUint(n, 10) == s
}

// tokenText is how printLock names a held lock's token.
func tokenText(h *Holder) string {
	if h.Token == "" && len(h.Tokens) > 0 {
		return "no token agreed (its masters hold " + strings.Join(h.Tokens, ", ") + ")"
	}
	return "token " + dash(h.Token)
}

// printLock writes v as a table and the quorum's view.
func printLock(w io.Writer, v *LockView) {
	fmt.Fprintf(w, "lock %q on %d masters (quorum %d) at %s\n", v.Key, len(v.Masters), v.Quorum, v.At.Format(time.RFC3339Nano))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MASTER\tOWNER\tHOLDS\tTOKEN\tTTL\tFENCE\tREADERS\tWRITE-WAIT")
	for _, m := range v.Masters {
		if m.Error != "" {
			fmt.Fprintf(tw, "%s\terror: %s\t\t\t\t\t\t\n", m.Master, m.Error)
			continue
		}
		readers := make([]string, len(m.Readers))
		for i, r := range m.Readers {
			readers[i] = r.Owner + " " + ttl(r.TTLms)
		}
		wait := "-"
		if m.WriteWait != "" {
			wait = m.WriteWait + " " + ttl(m.WriteWaitTTLms)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.Master, dash(m.Owner), dash(strconv.Itoa(m.Holds)), dash(m.Token),
			ttlOrDash(m.Owner, m.TTLms), dash(m.Fence)+ttlSuffix(m.Fence, m.FenceTTLms), dash(strings.Join(readers, ", ")), wait)
	}
	_ = tw.Flush()
	switch h := v.Writer; {
	case h == nil && len(v.Readers) == 0:
		fmt.Fprintln(w, "quorum: not held")
	case h != nil && h.Held:
		fmt.Fprintf(w, "quorum: held by %s (Lock %s%s) on %d of %d masters %s, %s\n",
			h.Owner, h.Nonce, described(h), h.Masters, len(v.Masters), untilText(h.Until, v.At), tokenText(h))
	case h != nil:
		fmt.Fprintf(w, "quorum: not held; %s holds it on %d of %d masters only\n", h.Owner, h.Masters, len(v.Masters))
	}
	for _, r := range v.Readers {
		if r.Held {
			fmt.Fprintf(w, "quorum: read by %s%s on %d of %d masters %s\n", r.Owner, readerText(&r), r.Masters, len(v.Masters), untilText(r.Until, v.At))
		} else {
			fmt.Fprintf(w, "quorum: not read by %s (on %d of %d masters only)\n", r.Owner, r.Masters, len(v.Masters))
		}
	}
}

// described is ", " and h's description, if it has one.
func described(h *Holder) string {
	if h.Description == "" {
		return ""
	}
	return ", " + h.Description
}

// readerText is h's description in brackets, if it has one.
func readerText(h *Holder) string {
	if h.Description == "" {
		return ""
	}
	return " (" + h.Description + ")"
}

func untilText(until *time.Time, at time.Time) string {
	if until == nil {
		return "with no expiry"
	}
	return fmt.Sprintf("until %s (in %v)", until.Format(time.RFC3339Nano), until.Sub(at).Round(time.Millisecond))
}

func dash(s string) string {
	if s == "" || s == "0" {
		return "-"
	}
	return s
}

func ttl(ms int64) string {
	if ms == -1 {
		return "(no expiry)"
	}
	return (time.Duration(ms) * time.Millisecond).String()
}

func ttlOrDash(owner string, ms int64) string {
	if owner == "" {
		return "-"
	}
	return ttl(ms)
}

func ttlSuffix(v string, ms int64) string {
	if v == "" {
		return ""
	}
	return " (" + ttl(ms) + ")"
}
