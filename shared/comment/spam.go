package comment

import (
	"crypto/sha256"
	"encoding/binary"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/videngage/engagement/shared/errs"
	"golang.org/x/text/unicode/norm"
)

// Errors of the spam rules, each with its reason (400s): resending the same
// post unchanged cannot succeed, and a client must not retry it after a
// Retry-After as it would a rate limit.
var (
	ErrDuplicateText = errs.New(errs.DuplicateComment, "text", "you posted this text a moment ago (the same words, whatever the case, spacing, numbers or links); "+
		"post something new, or resend a post whose answer was lost with its first Idempotency-Key")
	ErrYoungAccountLinks = errs.New(errs.YoungAccountLinks, "text", "this account is too new to post links; post the comment without links, or once the account is a day old")
)

// SpamRules are the rules against comment spam beyond the per-user rate and
// the link count.
type SpamRules struct {
	// DuplicateWindow is how long a user's post blocks the same normalised
	// text (NormalizeText) from them, on any video; 0 switches the rule
	// off.
	DuplicateWindow time.Duration
	// YoungAge is the age under which an account is young: it may post no
	// links, and its posts count against the young accounts' rate limit.
	// 0: no account is young.
	YoungAge time.Duration
}

// Young reports whether an account the identity provider created at created
// is young at now; a zero created (no record) is not.
func (r SpamRules) Young(created, now time.Time) bool {
	return r.YoungAge > 0 && !created.IsZero() && now.Sub(created) < r.YoungAge
}

// NormalizeText is the text the duplicate rule compares: compatibility
// forms folded (NFKC: full-width and styled letters are letters), lower
// case, each link one token, each run of white space one space, invisible
// format characters (zero-width spaces) dropped, and no white space at
// either end. Copy-pasted spam that varies only its link, case or spacing
// normalises to one text. Digits are kept: "part 2?" and "part 3?" are two
// comments.
func NormalizeText(s string) string {
	s = linkPattern.ReplaceAllString(norm.NFKC.String(s), "\x00")
	var b strings.Builder
	b.Grow(len(s))
	var last rune = ' ' // no leading space
	for _, r := range s {
		switch {
		case r == '\x00': // a link
		case unicode.IsSpace(r):
			r = ' '
		case unicode.Is(unicode.Cf, r):
			continue
		default:
			r = unicode.ToLower(r)
		}
		if r == ' ' && last == ' ' {
			continue
		}
		b.WriteRune(r)
		last = r
	}
	return strings.TrimSuffix(b.String(), " ")
}

// TextDigest is the digest the duplicate rule keeps of a user's post: a
// hash of the normalised text keyed by the user, so that the state holds no
// text and the same text of two users gives two digests.
type TextDigest [8]byte

// DigestText is the TextDigest of text posted by userID.
func DigestText(userID, text string) TextDigest {
	h := sha256.New()
	n := NormalizeText(text)
	for _, p := range []string{userID, n} {
		h.Write([]byte(strconv.Itoa(len(p))))
		h.Write([]byte{':'})
		h.Write([]byte(p))
	}
	var d TextDigest
	copy(d[:], h.Sum(nil))
	return d
}

// MaxRecentTexts bounds the digests kept per user: more than a user at the
// default rate limit (10 a minute: 5 at once, then one every 10 seconds)
// can post in the default window of 10 minutes (65). Past it the oldest
// go first.
const MaxRecentTexts = 80

// recentTextSize is the size of one encoded entry: the digest and the post's
// time in Unix milliseconds.
const recentTextSize = len(TextDigest{}) + 8

// MaxRecentTextsBytes is the largest encoding of RecentTexts
// (CommentRateLimits.RecentTexts).
const MaxRecentTextsBytes = MaxRecentTexts * recentTextSize

// RecentText is one post's digest and time.
type RecentText struct {
	Digest TextDigest
	At     time.Time
}

// RecentTexts are a user's recent posts, oldest first.
type RecentTexts []RecentText

// DecodeRecentTexts reads an encoding of RecentTexts; a trailing partial
// entry, which Encode never writes, is ignored.
func DecodeRecentTexts(b []byte) RecentTexts {
	out := make(RecentTexts, 0, len(b)/recentTextSize)
	for ; len(b) >= recentTextSize; b = b[recentTextSize:] {
		var e RecentText
		copy(e.Digest[:], b)
		e.At = time.UnixMilli(int64(binary.BigEndian.Uint64(b[len(e.Digest):]))).UTC()
		out = append(out, e)
	}
	return out
}

// Encode is the stored form of r: each entry's digest and time.
func (r RecentTexts) Encode() []byte {
	out := make([]byte, 0, len(r)*recentTextSize)
	for _, e := range r {
		out = append(out, e.Digest[:]...)
		out = binary.BigEndian.AppendUint64(out, uint64(e.At.UnixMilli()))
	}
	return out
}

// Seen reports whether d was posted within window before now.
func (r RecentTexts) Seen(d TextDigest, now time.Time, window time.Duration) bool {
	for _, e := range r {
		if e.Digest == d && now.Sub(e.At) < window {
			return true
		}
	}
	return false
}

// Add returns r with d posted at now, without the entries older than window
// and at most MaxRecentTexts long.
func (r RecentTexts) Add(d TextDigest, now time.Time, window time.Duration) RecentTexts {
	out := make(RecentTexts, 0, min(len(r)+1, MaxRecentTexts))
	for _, e := range r {
		if now.Sub(e.At) < window {
			out = append(out, e)
		}
	}
	out = append(out, RecentText{Digest: d, At: now.Truncate(time.Millisecond).UTC()})
	if len(out) > MaxRecentTexts {
		out = out[len(out)-MaxRecentTexts:]
	}
	return out
}
