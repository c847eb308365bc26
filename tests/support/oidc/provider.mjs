// A real OpenID provider for the tests (oidc-provider's own login and consent pages), on a
// loopback port of its own. tests/support/oidc_provider.py starts it and reads its first
// stdout line: {"issuer": "http://127.0.0.1:PORT"}.
//
// $OIDC_TEST_SETUP (JSON) holds the clients (client_id, client_secret, redirect_uris,
// post_logout_redirect_uris) and the accounts: the login typed on the login page -> the
// claims it gets (any other login gets only an email of its own, at unknown.example).
//
// One test hook, POST /__test/tamper {"mode": ...}: the next token response's ID token is
// replaced by one made as an attacker or a broken provider would (test code, not signoff's):
//   issuer  - the same claims with another "iss", signed with this provider's own key
//   key     - the same claims, signed by another key under this provider's key id
//   expired - expired ten minutes ago, signed with this provider's own key
//   nonce   - another nonce, signed with this provider's own key
import http from 'node:http';
import crypto from 'node:crypto';
import Provider from 'oidc-provider';
import * as jose from 'jose';

const setup = JSON.parse(process.env.OIDC_TEST_SETUP || '{}');
const accounts = setup.accounts || {};

const server = http.createServer();
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const issuer = `http://127.0.0.1:${server.address().port}`;

const signing = await jose.generateKeyPair('RS256', { extractable: true });
const privateJwk = { ...(await jose.exportJWK(signing.privateKey)), kid: 'test-key-1', alg: 'RS256', use: 'sig' };
const foreign = await jose.generateKeyPair('RS256', { extractable: true });

const provider = new Provider(issuer, {
  clients: setup.clients || [],
  jwks: { keys: [privateJwk] },
  cookies: { keys: [crypto.randomBytes(32).toString('hex')] },
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['name'],
    groups: ['groups'],
  },
  features: {
    devInteractions: { enabled: true },
    rpInitiatedLogout: { enabled: true },
  },
  pkce: { required: () => true },
  ttl: { IdToken: 300, AccessToken: 300, AuthorizationCode: 60, Session: 3600, Interaction: 600, Grant: 3600 },
  async findAccount(ctx, id) {
    const claims = accounts[id] || { email: `${id}@unknown.example`, email_verified: true };
    return { accountId: id, async claims() { return { sub: id, ...claims }; } };
  },
});
provider.proxy = false;

let tamper = null;

provider.use(async (ctx, next) => {
  if (ctx.path === '/__test/tamper' && ctx.method === 'POST') {
    const chunks = [];
    for await (const chunk of ctx.req) chunks.push(chunk);
    tamper = JSON.parse(Buffer.concat(chunks).toString() || '{}').mode || null;
    ctx.status = 204;
    return;
  }
  await next();
  if (ctx.path === '/token' && tamper && ctx.body && ctx.body.id_token) {
    const mode = tamper;
    tamper = null;
    const claims = jose.decodeJwt(ctx.body.id_token);
    let key = signing.privateKey;
    const now = Math.floor(Date.now() / 1000);
    if (mode === 'issuer') claims.iss = 'http://127.0.0.1:9/another-issuer';
    if (mode === 'key') key = foreign.privateKey;
    if (mode === 'expired') { claims.iat = now - 1200; claims.exp = now - 600; }
    if (mode === 'nonce') claims.nonce = 'not-the-nonce-signoff-sent';
    ctx.body = {
      ...ctx.body,
      id_token: await new jose.SignJWT(claims)
        .setProtectedHeader({ alg: 'RS256', kid: 'test-key-1', typ: 'JWT' })
        .sign(key),
    };
  }
});

server.on('request', provider.callback());
process.stdout.write(`${JSON.stringify({ issuer })}\n`);
process.on('SIGTERM', () => server.close(() => process.exit(0)));
