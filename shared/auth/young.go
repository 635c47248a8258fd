package auth

import (
	"context"
	"fmt"
	"time"

	"github.com/videngage/engagement/shared/config"
	"github.com/videngage/engagement/shared/errs"
)

// ErrAccountAgeUnknown: the identity provider's record of an account could
// not be read in time, so whether it is young is unknown. The young-account
// rules fail closed on it: a write is refused with 503 and Retry-After
// (it wraps errs.ErrBackendUnavailable), a view waits for its redelivery.
var ErrAccountAgeUnknown = fmt.Errorf("%w: the account's age cannot be read", errs.ErrBackendUnavailable)

// accountLookupBudget bounds the wait for the identity provider's record
// of accounts an instance has not seen.
const accountLookupBudget = time.Second

// AccountAgeRetryAfter is the Retry-After of a write refused for
// ErrAccountAgeUnknown.
const AccountAgeRetryAfter = 2 * time.Second

// YoungAccounts is the one young-account rule of comments, reactions and
// views: an account the identity provider created less than age ago is
// young. It fails closed: when the provider's record cannot be read within
// its budget, the answer is ErrAccountAgeUnknown, never "established". An
// account the provider has no record of (a token minted by the local
// issuer without an age) is established. A nil *YoungAccounts (the rule
// off) finds no account young.
type YoungAccounts struct {
	created *AccountCreation
	age     time.Duration
	now     func() time.Time
}

// NewYoungAccounts judges by created, with the young age age.
func NewYoungAccounts(created *AccountCreation, age time.Duration) *YoungAccounts {
	return &YoungAccounts{created: created, age: age, now: time.Now}
}

// YoungAccountsOf is the rule cfg configures: young under age (from
// COMMENT_YOUNG_ACCOUNT_AGE), judged by the account records
// (AccountRecordsOf), remembered per instance; nil (no account young) when
// age is 0 or no records are configured (ACCOUNT_RECORDS_URL, which every
// deployed function has, or FIREBASE_AUTH_EMULATOR_HOST locally).
func YoungAccountsOf(ctx context.Context, cfg *config.Config) (*YoungAccounts, error) {
	age := cfg.Comments.YoungAccountAge
	if age <= 0 {
		return nil, nil
	}
	records, err := AccountRecordsOf(ctx, cfg)
	if err != nil || records == nil {
		return nil, err
	}
	return NewYoungAccounts(NewAccountCreation(records, cfg.Moderation.AccountRecordsCache), age), nil
}

// Created returns when uid's account was created (zero when the provider
// has no record of it), for rules that judge the age themselves
// (comment.SpamRules); ErrAccountAgeUnknown when its record cannot be read
// in time.
func (y *YoungAccounts) Created(ctx context.Context, uid string) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, accountLookupBudget)
	defer cancel()
	t, err := y.created.Created(ctx, uid)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: %w", ErrAccountAgeUnknown, err)
	}
	return t, nil
}

// Young reports whether uid's account is young now; ErrAccountAgeUnknown
// when its record cannot be read in time.
func (y *YoungAccounts) Young(ctx context.Context, uid string) (bool, error) {
	young, err := y.YoungAmong(ctx, []string{uid})
	return young[uid], err
}

// YoungAmong returns which of uids are young now (one lookup for those the
// instance has not seen); ErrAccountAgeUnknown when a record cannot be read
// in time.
func (y *YoungAccounts) YoungAmong(ctx context.Context, uids []string) (map[string]bool, error) {
	out := map[string]bool{}
	if y == nil || y.age <= 0 || len(uids) == 0 {
		return out, nil
	}
	ctx, cancel := context.WithTimeout(ctx, accountLookupBudget)
	defer cancel()
	created, err := y.created.CreatedMany(ctx, uids)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrAccountAgeUnknown, err)
	}
	now := y.now()
	for _, u := range uids {
		if t := created[u]; !t.IsZero() && now.Sub(t) < y.age {
			out[u] = true
		}
	}
	return out, nil
}
