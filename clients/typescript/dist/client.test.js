// Unit tests of the wrapper's retries and session token, with a fake fetch
// (node --test dist/): make test-contract runs them.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Engagement, byteOrder } from "./client.js";
const TOKEN = "GJyrCjQh6Og";
/** fake answers each request with the next of answers and records it. */
function fake(answers) {
    const seen = [];
    const waits = [];
    const client = new Engagement({
        baseUrl: "http://api.test",
        idToken: () => "id-token",
        fetch: async (req) => {
            seen.push(req);
            const next = answers.shift();
            assert.ok(next, `unexpected request ${req.method} ${req.url}`);
            return next();
        },
        sleep: async (ms) => {
            waits.push(ms);
        },
    });
    return { client, seen, waits };
}
const json = (status, body, headers = {}) => () => new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json", ...headers } });
const limited = (after) => json(429, { error: { code: 429, status: "RESOURCE_EXHAUSTED", message: "too many reactions" } }, { "Retry-After": after });
const reaction = { contentId: "v1", reaction: "like", version: 3, updateTime: "2026-03-14T09:26:53.589793Z" };
test("a 429 is sent again after its Retry-After, with the same body", async () => {
    const { client, seen, waits } = fake([limited("2"), json(200, reaction, { ETag: '"3"', "Session-Token": TOKEN })]);
    const r = await client.setReaction("v1", "like");
    assert.ok(r.ok);
    assert.equal(r.etag, '"3"');
    assert.deepEqual(waits, [2000]);
    assert.equal(seen.length, 2);
    assert.equal(await seen[1]?.text(), JSON.stringify({ reaction: "like" }));
    assert.equal(seen[1]?.headers.get("Authorization"), "Bearer id-token");
});
test("a Retry-After longer than the longest wait is answered, not waited for", async () => {
    const { client, waits } = fake([limited("3600")]);
    const r = await client.setReaction("v1", "like");
    assert.ok(!r.ok);
    assert.equal(r.status, 429);
    assert.equal(r.retryAfter, 3600);
    assert.equal(r.error.status, "RESOURCE_EXHAUSTED");
    assert.equal(r.reason, undefined);
    assert.deepEqual(waits, []);
});
test("retries stop after three", async () => {
    const { client, seen } = fake([limited("0"), limited("0"), limited("0"), limited("0")]);
    const r = await client.setReaction("v1", "like");
    assert.equal(r.status, 429);
    assert.equal(seen.length, 4);
});
test("a 503 of a POST without Idempotency-Key is not sent again", async () => {
    const down = json(503, { error: { code: 503, status: "UNAVAILABLE", message: "down" } }, { "Retry-After": "1" });
    const { client, seen } = fake([down]);
    const r = Engagement.result(await client.api.POST("/v1/history", { body: { videoId: "v1" } }));
    assert.equal(r.status, 503);
    assert.equal(seen.length, 1);
});
test("a comment carries an Idempotency-Key, so its 503 is sent again with the same key", async () => {
    const down = json(503, { error: { code: 503, status: "UNAVAILABLE", message: "down" } }, { "Retry-After": "1" });
    const comment = { id: "c1", videoId: "v1", authorId: "u1", text: "hi", createTime: "2026-03-14T09:26:53Z", replyCount: 0 };
    const { client, seen } = fake([down, json(201, comment, { "Session-Token": TOKEN })]);
    const r = await client.postComment("v1", "hi");
    assert.ok(r.ok);
    const keys = seen.map((q) => q.headers.get("Idempotency-Key"));
    assert.equal(keys.length, 2);
    assert.ok(keys[0] && keys[0] === keys[1]);
});
test("the latest write's Session-Token goes with GET /v1/me/counts", async () => {
    const { client, seen } = fake([
        json(200, reaction, { ETag: '"3"', "Session-Token": TOKEN }),
        json(200, { counts: {}, viewer: { reactions: {} } }),
        json(200, { counts: {}, viewer: { reactions: {} } }),
    ]);
    await client.setReaction("v1", "like");
    await client.myCounts(["v1"]);
    await client.myCounts(["v1"], { strong: true });
    assert.equal(client.sessionToken, TOKEN);
    assert.equal(seen[1]?.headers.get("Session-Token"), TOKEN);
    assert.equal(seen[2]?.headers.get("Session-Token"), null);
});
test("ids go as one comma-separated parameter, canonical for the public counts", async () => {
    const { client, seen } = fake([json(200, { counts: {} })]);
    await client.counts(["b", "a", "b", "B"]);
    assert.equal(new URL(seen[0]?.url ?? "").search, "?ids=B,a,b");
    assert.deepEqual(byteOrder(["é", "z", "a"]), ["a", "z", "é"]);
});
test("an error's reason is its ErrorInfo's", async () => {
    const stale = json(412, {
        error: {
            code: 412,
            status: "FAILED_PRECONDITION",
            message: "the reaction is at version 4",
            details: [{ "@type": "type.googleapis.com/google.rpc.ErrorInfo", reason: "STALE_VERSION", domain: "engagement.videngage.dev", metadata: { currentVersion: "4" } }],
        },
    }, { ETag: '"4"' });
    const { client } = fake([stale]);
    const r = await client.setReaction("v1", "like", '"3"');
    assert.ok(!r.ok);
    assert.equal(r.reason, "STALE_VERSION");
    assert.equal(r.etag, '"4"');
});
