// smoke drives the typed client against a running stack (node
// dist/smoke.js <base URL>): cmd/local's TestTypeScriptClient runs it on the
// local stack. Each check throws on a wrong answer; the last line printed is
// a JSON summary of what was checked.
import { Engagement, type Result } from "./client.js";

const base = process.argv[2];
if (base === undefined) {
  throw new Error("usage: node smoke.js <base URL>");
}

const checks: string[] = [];
function check(cond: boolean, what: string, got?: unknown): void {
  if (!cond) {
    throw new Error(`${what}: got ${JSON.stringify(got)}`);
  }
  checks.push(what);
}

function data<T>(r: Result<T>, what: string): T {
  if (!r.ok) {
    throw new Error(`${what}: ${r.status} ${JSON.stringify(r.error)}`);
  }
  return r.data;
}

async function idToken(uid: string): Promise<string> {
  const res = await fetch(`${base}/dev/token?uid=${encodeURIComponent(uid)}`);
  const body: unknown = await res.json();
  if (typeof body !== "object" || body === null || !("idToken" in body) || typeof body.idToken !== "string") {
    throw new Error(`/dev/token: ${res.status} ${JSON.stringify(body)}`);
  }
  return body.idToken;
}

async function eventually<T>(what: string, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const v = await probe();
    if (v !== undefined) {
      return v;
    }
    if (Date.now() > deadline) {
      throw new Error(`${what}: not within 60 s`);
    }
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

const run = Date.now().toString(36);
const token = await idToken(`ts-${run}`);
const client = new Engagement({ baseUrl: base, idToken: () => token });
const video = `tsvideo-${run}`;
const other = `tsother-${run}`;

// A reaction: its version as ETag, and the write's session token.
const liked = await client.setReaction(video, "like");
const reaction = data(liked, "PUT like");
check(reaction.reaction === "like" && reaction.version >= 1, "PUT like stores version ≥ 1", reaction);
check(liked.ok && liked.etag === `"${reaction.version}"`, "the answer's ETag is the version", liked.ok && liked.etag);
check(liked.ok && /^[A-Za-z0-9_-]{11}$/.test(liked.sessionToken ?? ""), "the answer carries a Session-Token", liked.ok && liked.sessionToken);
check(client.sessionToken === (liked.ok ? liked.sessionToken : undefined), "the client keeps the latest Session-Token");

// If-Match with a stale version: 412, and the current version in ETag.
const stale = await client.setReaction(video, "dislike", `"${reaction.version + 7}"`);
check(!stale.ok && stale.status === 412 && stale.error.status === "FAILED_PRECONDITION", "a stale If-Match is 412 FAILED_PRECONDITION", stale);
check(stale.etag === `"${reaction.version}"`, "the 412 names the current version in ETag", stale.etag);
// The reason a program branches on, where the answer carries details (AIP-193).
check(!stale.ok && (stale.reason === "STALE_VERSION" || !("details" in stale.error)), "a 412 with details gives the reason STALE_VERSION", !stale.ok && stale.error);
const fresh = await client.setReaction(video, "like", stale.etag);
check(fresh.ok && fresh.data.version === reaction.version, "If-Match with that ETag succeeds", fresh);

// The caller's view holds the like at once (read-your-writes).
const mine = data(await client.myCounts([video, other]), "GET /v1/me/counts");
check(mine.counts[video]?.likes === 1, "my counts hold my like", mine.counts[video]);
check(mine.viewer.reactions[video]?.reaction === "like", "my counts hold my reaction", mine.viewer.reactions);
check(mine.counts[other]?.likes === 0, "an unknown id counts zero", mine.counts[other]);

// The public counts, ids in any order and repeated: the client sends them canonical.
const pub = await eventually("the public like count", async () => {
  const r = data(await client.counts([video, other, video]), "GET /v1/counts");
  return r.counts[video]?.likes === 1 ? r : undefined;
});
check(Object.keys(pub.counts).sort().join() === [other, video].sort().join(), "public counts answer every id once", Object.keys(pub.counts));

// A comment, retried with its Idempotency-Key: one comment.
const key = `key-${run}`;
const posted = data(await client.postComment(video, "Hello from the typed client", { idempotencyKey: key }), "POST comment");
const again = data(await client.postComment(video, "Hello from the typed client", { idempotencyKey: key }), "POST comment again");
check(again.id === posted.id, "a retry with the same Idempotency-Key answers the same comment", [posted.id, again.id]);
const page = data(Engagement.result(await client.api.GET("/v1/videos/{videoId}/comments", { params: { path: { videoId: video }, query: { pageSize: 10 } } })), "GET comments");
check(page.comments.length === 1 && page.comments[0]?.id === posted.id, "the comment is listed once", page.comments);

// An error a program branches on: more than two links.
const spam = await client.postComment(video, "see a.com/x and b.com/y and c.com/z");
check(!spam.ok && spam.status === 400 && spam.error.status === "INVALID_ARGUMENT", "three links are 400 INVALID_ARGUMENT", spam);
check(!spam.ok && (spam.reason === "TOO_MANY_LINKS" || !("details" in spam.error)), "three links with details give the reason TOO_MANY_LINKS", !spam.ok && spam.error);

// History: a watch, then the entry with its position.
const watched = data(Engagement.result(await client.api.POST("/v1/history", { body: { videoId: video, positionSeconds: 12.5 } })), "POST history");
check(watched.recorded, "the watch is recorded", watched);
const entry = await eventually("the history entry", async () => {
  const h = data(Engagement.result(await client.api.GET("/v1/history", { params: { query: { pageSize: 10 } } })), "GET history");
  return h.entries.find((e) => e.videoId === video);
});
check(entry.positionSeconds === 12.5, "history holds the watch's position", entry);

console.log(JSON.stringify({ ok: true, checks }));
