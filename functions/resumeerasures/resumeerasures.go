// Package resumeerasuresfn is the ResumeErasures function (POST
// /internal/resume-erasures, called by Cloud Scheduler each minute): it
// sends EraseAccount a message for every open account erasure that has not
// moved for a while — one whose message was lost, whose worker died after
// Pub/Sub gave up redelivering, or that waited for its claims to settle.
// A message too many changes nothing: EraseAccount resumes from the record.
package resumeerasuresfn

import (
	"context"
	"net/http"
	"time"

	"github.com/videngage/engagement/functions/host"
	"github.com/videngage/engagement/shared/account"
	"github.com/videngage/engagement/shared/account/accountstore"
	"github.com/videngage/engagement/shared/bus"
	"github.com/videngage/engagement/shared/httpx"
	"github.com/videngage/engagement/shared/spannerdb"
)

func init() {
	host.RegisterHTTP("ResumeErasures", host.NeedSpanner|host.NeedPubSub,
		func(ctx context.Context, c *host.Clients) (http.Handler, error) {
			return New(Deps{
				Store:        accountstore.New(spannerdb.Wrap(c.Spanner, c.Config)),
				Publisher:    bus.NewPublisher(c.PubSub, c.Config.PubSub.ErasureTopic),
				StalledAfter: c.Config.Erasure.StalledAfter,
				Settle:       c.Config.Erasure.Settle,
			}), nil
		})
}

// Interfaces of what the handler uses.
type (
	Store interface {
		Stalled(ctx context.Context, before time.Time, limit int) ([]account.Erasure, error)
	}
	Publisher interface {
		Publish(ctx context.Context, data []byte, attrs map[string]string) (string, error)
	}
)

// Deps are the handler's collaborators.
type Deps struct {
	Store     Store
	Publisher Publisher
	// StalledAfter is how long an erasure may go without a step.
	StalledAfter time.Duration
	// Settle is the erasures' wait at account.Settle: one waiting there is
	// sent a message only once its wait is over.
	Settle time.Duration
	Now    func() time.Time
}

// maxPerRun bounds the messages one invocation sends.
const maxPerRun = 1000

type handler struct{ Deps }

// New builds the handler.
func New(d Deps) http.Handler {
	if d.Now == nil {
		d.Now = time.Now
	}
	h := &handler{d}
	return httpx.Job("POST /internal/resume-erasures", RunTimeout, nil, h.run)
}

// RunTimeout bounds a run: the next one comes a minute later.
const RunTimeout = time.Minute

// Report is the answer: how many erasures were sent on.
type Report struct {
	Stalled int `json:"stalled"`
	Resumed int `json:"resumed"`
}

func (h *handler) run(ctx context.Context, _ struct{}) (Report, error) {
	now := h.Now()
	stalled, err := h.Store.Stalled(ctx, now.Add(-h.StalledAfter), maxPerRun)
	if err != nil {
		return Report{}, err
	}
	rep := Report{Stalled: len(stalled)}
	for _, e := range stalled {
		if e.Phase == account.Settle && now.Before(e.RequestTime.Add(h.Settle)) {
			continue
		}
		data, err := account.Message{UserID: e.UserID}.Encode()
		if err != nil {
			return Report{}, err
		}
		if _, err := h.Publisher.Publish(ctx, data, map[string]string{"kind": "account-erasure"}); err != nil {
			return Report{}, err
		}
		rep.Resumed++
	}
	return rep, nil
}
