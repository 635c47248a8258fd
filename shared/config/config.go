// Package config reads the service configuration from the environment. Every
// function reads the same variables; Terraform sets them by these names.
package config

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sethvargo/go-envconfig"
)

// Config is the whole configuration, built from small sub-configs.
type Config struct {
	Project    string `env:"GOOGLE_CLOUD_PROJECT, default=local-project"`
	Spanner    Spanner
	Bigtable   Bigtable
	Firestore  Firestore
	PubSub     PubSub
	Objects    Objects
	Auth       Auth
	HTTP       HTTP
	Counters   Counters
	Comments   Comments
	History    History
	Erasure    Erasure
	Export     Export
	Moderation Moderation
	Detection  Detection
	Telemetry  Telemetry
}

type Spanner struct {
	Instance string `env:"SPANNER_INSTANCE, default=engagement"`
	Database string `env:"SPANNER_DATABASE, default=engagement"`
	// DatabaseRole is the fine-grained access control role the client acts
	// as (CREATE ROLE in shared/topology/ddl); empty acts with the
	// identity's database-level IAM roles (the local stack and the tools).
	DatabaseRole string `env:"SPANNER_DATABASE_ROLE"`
	// EmulatorHost is read by the client library too; set means "the
	// emulator", which runs one read-write transaction at a time.
	EmulatorHost string `env:"SPANNER_EMULATOR_HOST"`
}

// DatabasePath is the full Spanner database name.
func (c *Config) DatabasePath() string {
	return fmt.Sprintf("projects/%s/instances/%s/databases/%s", c.Project, c.Spanner.Instance, c.Spanner.Database)
}

type Bigtable struct {
	Instance string `env:"BIGTABLE_INSTANCE, default=engagement"`
	// AppProfile routes a user's reads to the cluster that took their writes
	// (single-cluster routing) in a replicated instance; empty is the default profile.
	AppProfile string `env:"BIGTABLE_APP_PROFILE"`
	// TransactionalAppProfile is the profile of single-row transactions
	// (the rate limiter's increments): they need single-cluster routing with
	// transactional writes allowed, which a multi-cluster (failover) profile
	// refuses. Empty: the AppProfile client serves them too (one cluster, or
	// the emulator).
	TransactionalAppProfile string `env:"BIGTABLE_TRANSACTIONAL_APP_PROFILE"`
	EmulatorHost            string `env:"BIGTABLE_EMULATOR_HOST"`
}

type Firestore struct {
	Database     string `env:"FIRESTORE_DATABASE, default=(default)"`
	EmulatorHost string `env:"FIRESTORE_EMULATOR_HOST"`
}

type PubSub struct {
	HistoryTopic string `env:"HISTORY_TOPIC, default=history-events"`
	CounterTopic string `env:"COUNTER_TOPIC, default=counter-events"`
	// ErasureTopic carries the account erasures' steps (DELETE /v1/me).
	ErasureTopic string `env:"ERASURE_TOPIC, default=account-erasures"`
	// ExportTopic carries the exports to prepare (GET /v1/me/export of a
	// large account) to PrepareExport.
	ExportTopic  string `env:"EXPORT_TOPIC, default=account-exports"`
	EmulatorHost string `env:"PUBSUB_EMULATOR_HOST"`
}

// Objects are the Cloud Storage settings (shared/objects). Every bucket is
// named by its own variable; Config.Buckets lists them for the emulators'
// provisioning.
type Objects struct {
	// ExportsBucket holds the account exports prepared asynchronously,
	// until the bucket's lifecycle deletes them.
	ExportsBucket string `env:"EXPORTS_BUCKET, default=local-project-exports"`
	// EmulatorHost is read by the client library too; set means "the
	// emulator", whose object URLs are signed with a key of the instance's
	// own instead of the identity's (IAM signBlob).
	EmulatorHost string `env:"STORAGE_EMULATOR_HOST"`
}

// Buckets are the names of every bucket the service writes.
func (c *Config) Buckets() []string {
	return []string{c.Objects.ExportsBucket, c.Erasure.LogBucket}
}

type Auth struct {
	// Audience is the Firebase project id; the issuer defaults to
	// https://securetoken.google.com/<audience>.
	Audience string `env:"AUTH_AUDIENCE, default=local-project"`
	Issuer   string `env:"AUTH_ISSUER"`
	// JWKSURL is where the signing keys are published: Google's securetoken
	// key set in the cloud, the local issuer's key set locally.
	JWKSURL string `env:"AUTH_JWKS_URL, default=https://www.googleapis.com/service_accounts/v1/jwk/securetoken@system.gserviceaccount.com"`
	// TokenCache is how many verified tokens an instance remembers until
	// they expire (0: verify every token with RSA).
	TokenCache int `env:"AUTH_TOKEN_CACHE, default=10000"`
	// SignInProviders are the firebase.sign_in_provider values whose tokens
	// are accepted ("password", "google.com", "anonymous", ...); empty is
	// DefaultSignInProviders. Read it through AcceptedProviders.
	SignInProviders []string `env:"AUTH_SIGN_IN_PROVIDERS"`
	// Tenant is the Identity Platform tenant whose tokens are accepted
	// (firebase.tenant); empty accepts only tokens of no tenant.
	Tenant string `env:"AUTH_TENANT"`
	// EmulatorHost is where the account records are read locally (the
	// Firebase Auth emulator's variable; the local stack's token issuer
	// answers them), in place of ACCOUNT_RECORDS_URL.
	EmulatorHost string `env:"FIREBASE_AUTH_EMULATOR_HOST"`
}

// DefaultSignInProviders are the sign-in providers accepted when
// AUTH_SIGN_IN_PROVIDERS is unset: accounts that cost their owner an e-mail
// address or a Google account. Anonymous accounts cost nothing and are
// accepted only when named.
var DefaultSignInProviders = []string{"password", "google.com"}

// AcceptedProviders are the sign-in providers whose tokens are accepted.
func (a Auth) AcceptedProviders() []string {
	if len(a.SignInProviders) == 0 {
		return DefaultSignInProviders
	}
	return a.SignInProviders
}

// CheckSignInProviders fails on an accepted provider that is not a sign-in
// provider id Firebase puts in firebase.sign_in_provider: a misspelt one
// would lock its users out.
func (a Auth) CheckSignInProviders() error {
	for _, p := range a.AcceptedProviders() {
		switch {
		case p == "password", p == "email", p == "phone", p == "anonymous", p == "custom",
			p == "google.com", p == "apple.com", p == "facebook.com", p == "github.com",
			p == "microsoft.com", p == "twitter.com", p == "yahoo.com",
			p == "playgames.google.com", p == "gc.apple.com":
		case (strings.HasPrefix(p, "oidc.") || strings.HasPrefix(p, "saml.")) && len(p) > len("oidc."):
		default:
			return fmt.Errorf("AUTH_SIGN_IN_PROVIDERS: %q is not a Firebase sign-in provider id such as password, google.com, anonymous or oidc.<name>", p)
		}
	}
	return nil
}

// TokenIssuer is the issuer the verifier expects.
func (a Auth) TokenIssuer() string {
	if a.Issuer != "" {
		return a.Issuer
	}
	return "https://securetoken.google.com/" + a.Audience
}

type HTTP struct {
	Port string `env:"PORT, default=8080"`
	// AllowedOrigins are the browser origins answered by CORS; "*" allows any.
	AllowedOrigins []string `env:"CORS_ALLOWED_ORIGINS"`
	// CountsMaxAge is the max-age of public counts answers (whole seconds).
	CountsMaxAge time.Duration `env:"COUNTS_MAX_AGE, default=2s"`
	// CountsCacheTTL is how long an instance holds public counts before
	// answering them with that max-age (0 turns the cache and the shared
	// reads off), and CountsCacheEntries how many ids it holds at most.
	CountsCacheTTL     time.Duration `env:"COUNTS_CACHE_TTL, default=1s"`
	CountsCacheEntries int           `env:"COUNTS_CACHE_ENTRIES, default=100000"`
	// CountsOwnInFlight is how many reads of signed-in callers' own rows an
	// instance runs at once; requests arriving meanwhile are read together
	// in the next (0: each request reads alone).
	CountsOwnInFlight int           `env:"COUNTS_OWN_IN_FLIGHT, default=2"`
	RequestTimeout    time.Duration `env:"REQUEST_TIMEOUT, default=10s"`
	// RateLimits off switches the per-user limits off (load tests of one
	// user); read it through Config.UserLimits.
	RateLimits Switch `env:"RATE_LIMITS, default=on"`
	// RateLimitBudget is how long a request waits for the shared per-user
	// limit's store (Bigtable's transactional cluster) before its instance
	// decides the limit alone (ratelimit.Degrading); not positive: as long
	// as the request's deadline allows.
	RateLimitBudget time.Duration `env:"RATE_LIMIT_STORE_BUDGET, default=250ms"`
	// MaxInstances is how many instances of this function may run at once
	// (Terraform's max_instance_count): while the shared limits' store does
	// not answer, each decides its share of twice a limit (ratelimit.Share).
	MaxInstances int `env:"FUNCTION_MAX_INSTANCES, default=1"`
	// PageTokenSecret signs page tokens so that they cannot be forged or
	// replayed by another user.
	PageTokenSecret string `env:"PAGE_TOKEN_SECRET, default=local-page-token-secret"`
	// PageTokenSecretAccepted is a second secret whose tokens still open
	// (a rotation's other secret; docs/operations.md). Tokens are signed
	// with PageTokenSecret only.
	PageTokenSecretAccepted string `env:"PAGE_TOKEN_SECRET_ACCEPTED"`
}

type Counters struct {
	RollupInterval  time.Duration `env:"ROLLUP_INTERVAL, default=5s"`
	ReactionsPerMin int           `env:"RATE_LIMIT_REACTIONS, default=60"`
	CommentsPerMin  int           `env:"RATE_LIMIT_COMMENTS, default=10"`
	// YoungCommentsPerMin limits the comments of a young account
	// (Comments.YoungAccountAge) in place of CommentsPerMin.
	YoungCommentsPerMin int `env:"RATE_LIMIT_COMMENTS_YOUNG, default=3"`
	// YoungReactionsPerMin limits the reactions of a young account
	// (Comments.YoungAccountAge), besides ReactionsPerMin.
	YoungReactionsPerMin int `env:"RATE_LIMIT_REACTIONS_YOUNG, default=10"`
	HistoryPerMin        int `env:"RATE_LIMIT_HISTORY, default=120"`
	// OtherWritesPerMin limits each other kind of write of a user on its
	// own: history deletions (one video or a clear), history settings,
	// comment deletions and account erasure requests.
	OtherWritesPerMin int `env:"RATE_LIMIT_OTHER_WRITES, default=30"`
	// ShardWritesPerSecond is the commit rate one shard row is meant to
	// take; the rollup raises a counter's shard count (4..64) above it.
	ShardWritesPerSecond float64 `env:"COUNTER_SHARD_WRITES_PER_SECOND, default=10"`
	// CountsMaxStaleness bounds how old a public counts read may be
	// (bounded-staleness read); a viewer's own rows are read strongly.
	CountsMaxStaleness time.Duration `env:"COUNTS_MAX_STALENESS, default=500ms"`
	// RelayAfter is the age at which the rollup republishes an outbox event
	// whose message was lost.
	RelayAfter time.Duration `env:"COUNTER_RELAY_AFTER, default=2m"`
	// ViewsFoldInterval is how often the rollup folds the staged views
	// inside its minute: a staged view waits for
	// it before it is counted.
	ViewsFoldInterval time.Duration `env:"VIEWS_FOLD_INTERVAL, default=1s"`
	// StallAfter is how long a change (an outbox row, a staged views batch)
	// may wait uncounted before the rollup reports its counter stalled: well
	// past the relay's republishing and Pub/Sub's redeliveries.
	StallAfter time.Duration `env:"COUNTER_STALL_AFTER, default=10m"`
}

// Comments are the rules against comment spam beyond the per-user rate and
// the link count (comment.SpamRules).
type Comments struct {
	// DuplicateWindow is how long a user's comment keeps them from posting
	// the same normalised text again, on any video; 0 turns the rule off.
	// At most a day counts: the row that holds the texts is deleted a day
	// after the user's last post.
	DuplicateWindow time.Duration `env:"COMMENT_DUPLICATE_WINDOW, default=10m"`
	// YoungAccountAge is the age, from the identity provider's record of
	// the account (ACCOUNT_RECORDS_URL), under which an account posts no
	// links and at most RATE_LIMIT_COMMENTS_YOUNG comments a minute; 0
	// turns the rule off.
	YoungAccountAge time.Duration `env:"COMMENT_YOUNG_ACCOUNT_AGE, default=24h"`
}

type History struct {
	// MaxAgeDays is the table-level retention (Bigtable GC max age).
	MaxAgeDays int `env:"HISTORY_MAX_AGE_DAYS, default=1096"`
	// BatchLinger is how long a batch of watches waits for company before
	// it is published; the request waits that much longer for its 202.
	BatchLinger time.Duration `env:"HISTORY_BATCH_LINGER, default=50ms"`
	// ViewWindow is the viewing window: a user's watch of a video counts a
	// view only if the user's last counted view of it was received at
	// least a window earlier (a rolling window, by server receive time),
	// and a watch dated more than a window before its receipt counts none.
	// A day is what "views cannot be farmed" means to a viewer: one account
	// adds at most one view a video a day, however often it plays it.
	ViewWindow time.Duration `env:"VIEW_WINDOW, default=24h"`
	// MaxViewsPerHour is the view velocity beyond which an account is
	// flagged automatically: more views counted in one clock hour than a
	// person can watch (moderation.ViewVelocity). 0 turns the check off.
	MaxViewsPerHour int `env:"MAX_VIEWS_PER_HOUR, default=600"`
	// ViewerHashKey keys the hash of a user id in the unique-viewers
	// sketches (history.ViewerHasher). Changing it makes every viewer a new
	// one to the sketches: set it once per environment.
	ViewerHashKey string `env:"VIEWER_HASH_KEY, default=local-viewer-hash-key"`
}

type Moderation struct {
	// PerMin limits each moderator's moderation calls a minute (flags,
	// spam marks, the moderation listings), read through UserLimits.
	PerMin int `env:"RATE_LIMIT_MODERATION, default=30"`
	// UnflagProtection is how long a moderator's unflag keeps the detectors
	// from flagging the account again; thirty days leave the moderator's
	// decision standing well past any review, and let an account that
	// resumes manipulating be found again.
	UnflagProtection time.Duration `env:"UNFLAG_PROTECTION, default=720h"`
	// AccountRecordsURL is the Identity Toolkit API
	// (https://identitytoolkit.googleapis.com) whose account records give
	// each account's creation time: to the detection (empty: an account's
	// age is its first reaction's) and to the comments' young-account rule
	// (empty: no account is young).
	AccountRecordsURL string `env:"ACCOUNT_RECORDS_URL"`
	// AccountRecordsCache is how many accounts' creation times an instance
	// of the Comments function remembers (0: ask for every post).
	AccountRecordsCache int `env:"ACCOUNT_RECORDS_CACHE, default=100000"`
}

// Detection is the layout of the manipulation detection's steps
// (functions/detectmanipulation): how many partitions scan a step, how many
// buckets of partitions its merge is cut by, and the candidates one share
// of the merge may hold. A change takes effect at a step boundary: a step
// begun under one layout is finished under it.
type Detection struct {
	// Partitions is how many partitions (ranges of the 4,096 item parts)
	// a step is cut into; each is scanned by one invocation at a time.
	Partitions int `env:"DETECTION_PARTITIONS, default=16"`
	// MergeBuckets is how many buckets of partitions the merge is cut by:
	// B·(B+1)/2 shares, each holding two buckets' candidates, so a share
	// holds about 2/B of the step's (at most Partitions).
	MergeBuckets int `env:"DETECTION_MERGE_BUCKETS, default=4"`
	// MaxShareCandidates bounds the candidate reactions one share holds
	// (its memory); a step with a larger share is skipped and counted.
	MaxShareCandidates int `env:"DETECTION_MAX_SHARE_CANDIDATES, default=4000000"`
}

type Export struct {
	// PerDay limits each user's exports (GET /v1/me/export) in any 24
	// hours, read through UserLimits; exports run one at a time per user.
	// An export reads everything held about the user, for up to ten
	// minutes: three a day cover a retry or two of a failed download.
	PerDay int `env:"EXPORTS_PER_DAY, default=3"`
	// AsyncAbove is the size over which an export is prepared in the
	// exports bucket by PrepareExport and handed over by a signed URL
	// rather than streamed: reactions and history entries in the first
	// pages the export reads.
	AsyncAbove int `env:"EXPORT_ASYNC_ABOVE, default=1000"`
}

type Erasure struct {
	// Settle is how long after an account erasure is asked for the views'
	// claims of the user's watches are kept: at least as long as Pub/Sub may
	// still redeliver a history message (maxDeliveryAttempts × (ack
	// deadline + maximum backoff) in topology.json: 10 × 120 s).
	Settle time.Duration `env:"ERASURE_SETTLE, default=20m"`
	// Budget bounds one EraseAccount delivery, well under the
	// subscription's 60 s ack deadline; the erasure goes on in the next.
	Budget time.Duration `env:"ERASURE_BUDGET, default=20s"`
	// StalledAfter is how long an open erasure may go without a step
	// before ResumeErasures sends it a message again.
	StalledAfter time.Duration `env:"ERASURE_STALLED_AFTER, default=2m"`
	// LogBucket is the Cloud Storage bucket of the erasure log: an entry
	// per erasure asked for, kept outside every store a restore rolls back
	// (docs/design/account.md).
	LogBucket string `env:"ERASURE_LOG_BUCKET, default=local-project-erasure-log"`
}

type Telemetry struct {
	// Exporter is where traces and metrics go: "gcp" (OTLP to Google's
	// endpoint, telemetry.googleapis.com: Cloud Trace and Cloud Monitoring), "stdout" (the local stack, to read them) or "none".
	Exporter string `env:"TELEMETRY_EXPORTER, default=gcp"`
	// SampleRatio is the share of traces started here that are recorded. A
	// request or message that arrives with a sampling decision (traceparent,
	// X-Cloud-Trace-Context) keeps that decision.
	SampleRatio float64 `env:"TELEMETRY_SAMPLE_RATIO, default=0.1"`
}

// Switch is a setting that is "on" or "off"; any other value fails the load.
type Switch bool

// EnvDecode implements envconfig.Decoder.
func (s *Switch) EnvDecode(v string) error {
	switch v {
	case "on":
		*s = true
	case "off":
		*s = false
	default:
		return fmt.Errorf("must be on or off, not %q", v)
	}
	return nil
}

// UserLimits are the per-user limits a minute of each kind of write, and
// of exports a day (one at a time); 0 is no limit.
type UserLimits struct {
	Reactions, Comments, History, OtherWrites, Moderation int
	// YoungComments are a young account's comments a minute, in place of
	// Comments; YoungReactions its reactions, besides Reactions.
	YoungComments, YoungReactions int
	ExportsPerDay                 int
}

// UserLimits are the limits in force: RATE_LIMIT_* unless RATE_LIMITS=off,
// which switches them all off (load tests of one user). This is the one
// place RATE_LIMITS is read.
func (c *Config) UserLimits() UserLimits {
	if !c.HTTP.RateLimits {
		return UserLimits{}
	}
	return UserLimits{
		Reactions:      max(c.Counters.ReactionsPerMin, 0),
		Comments:       max(c.Counters.CommentsPerMin, 0),
		YoungComments:  max(c.Counters.YoungCommentsPerMin, 0),
		YoungReactions: max(c.Counters.YoungReactionsPerMin, 0),
		History:        max(c.Counters.HistoryPerMin, 0),
		OtherWrites:    max(c.Counters.OtherWritesPerMin, 0),
		// Every moderation call of one moderator, listings included.
		Moderation:    max(c.Moderation.PerMin, 0),
		ExportsPerDay: max(c.Export.PerDay, 0),
	}
}

// FromEnv reads the configuration from the process environment.
func FromEnv(ctx context.Context) (*Config, error) {
	var c Config
	if err := envconfig.Process(ctx, &c); err != nil {
		return nil, fmt.Errorf("config.FromEnv: %w", err)
	}
	return &c, nil
}

// Defaults is the configuration with every variable unset: the defaults of
// the tags above, the one place each is stated. Code that needs a default
// (a constructor given a zero value by a test) reads it here.
func Defaults() Config { return defaults() }

var defaults = sync.OnceValue(func() Config {
	c, err := FromLookuper(context.Background(), envconfig.MapLookuper(nil))
	if err != nil {
		panic(err) // a malformed default tag: every test of this package fails on it
	}
	return *c
})

// FromLookuper reads the configuration from l (tests, the local stack).
func FromLookuper(ctx context.Context, l envconfig.Lookuper) (*Config, error) {
	var c Config
	if err := envconfig.ProcessWith(ctx, &envconfig.Config{Target: &c, Lookuper: l}); err != nil {
		return nil, fmt.Errorf("config.FromLookuper: %w", err)
	}
	return &c, nil
}
