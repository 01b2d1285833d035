// A real OpenID Connect provider for Gridlane's tests: panva's oidc-provider (OpenID Certified) with one
// client, a small directory of people with a `groups` claim, and the built-in sign-in pages (any password).
// Tests only: in-memory storage, an ephemeral RS256 signing key, plain http on loopback.
//
//   IDP_PORT (default 9000)         where it listens, on 127.0.0.1 only
//   IDP_RP_PORTS (default 8765-8774) the live-server ports whose callback URLs the client may use
//
// A test may change what the directory says about someone between two sign-ins:
//   PUT /test/accounts/<login>  {"groups": ["fraud"], "email": "x@example.test"}  -> 204
//   DELETE /test/accounts/<login>                                                -> 204 (back to the default)
import Provider from 'oidc-provider';

const PORT = Number(process.env.IDP_PORT || 9000);
const ISSUER = `http://127.0.0.1:${PORT}`;
const [FIRST, LAST] = (process.env.IDP_RP_PORTS || '8765-8774').split('-').map(Number);
const RP_ORIGINS = [];
for (let port = FIRST; port <= (LAST || FIRST); port += 1) RP_ORIGINS.push(`http://127.0.0.1:${port}`);

// The directory: what the provider knows about each login name. Unknown names get no groups.
const DIRECTORY = {
  alice: { groups: ['vision'] },
  bob: { groups: ['vision', 'vision-leads'] },
  charlie: { groups: ['fraud'] },
  it: { groups: ['it-admins'] },
};
const overrides = new Map();

function person(login) {
  const entry = { ...(DIRECTORY[login] || { groups: [] }), ...(overrides.get(login) || {}) };
  return {
    sub: `sub-${login}`,
    preferred_username: login,
    name: login,
    email: entry.email || `${login}@example.test`,
    email_verified: true,
    groups: entry.groups,
  };
}

const page = (title, body) => `<!DOCTYPE html><html><head><meta charset="utf-8"><title>${title}</title></head>
<body><main><h1>${title}</h1>${body}</main></body></html>`;

const provider = new Provider(ISSUER, {
  clients: [{
    client_id: 'gridlane-tests',
    client_secret: 'gridlane-tests-secret',
    client_name: 'Gridlane (tests)',
    redirect_uris: RP_ORIGINS.map((origin) => `${origin}/oidc/callback/`),
    post_logout_redirect_uris: RP_ORIGINS.map((origin) => `${origin}/accounts/signed-out/`),
    grant_types: ['authorization_code'],
    response_types: ['code'],
    // mozilla-django-oidc posts the client secret in the body unless told to use Basic.
    token_endpoint_auth_method: 'client_secret_post',
    id_token_signed_response_alg: 'RS256',
  }],
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['name', 'preferred_username'],
    groups: ['groups'],
  },
  scopes: ['openid', 'email', 'profile', 'groups'],
  // Refuse any authorization request without PKCE, so the tests prove Gridlane sends it.
  pkce: { required: () => true },
  features: {
    devInteractions: { enabled: true }, // the built-in sign-in page: any login name, any password
    rpInitiatedLogout: {
      enabled: true,
      async logoutSource(ctx, form) {
        ctx.body = page('Sign out of the test provider?', `${form}
          <button autofocus type="submit" form="op.logoutForm" value="yes" name="logout">Yes, sign me out</button>`);
      },
      async postLogoutSuccessSource(ctx) {
        ctx.body = page('Signed out of the test provider', '');
      },
    },
  },
  // Gridlane is a first-party client: grant its scopes without a consent page.
  async loadExistingGrant(ctx) {
    const grantId = ctx.oidc.result?.consent?.grantId || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
    if (grantId) return ctx.oidc.provider.Grant.find(grantId);
    const grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId });
    grant.addOIDCScope('openid email profile groups');
    await grant.save();
    return grant;
  },
  async findAccount(ctx, login) {
    // Claims are read at each userinfo call, so a changed directory shows at the next sign-in.
    return { accountId: login, async claims() { return person(login); } };
  },
  async renderError(ctx, out) {
    ctx.type = 'html';
    ctx.body = page('Test provider error', `<pre>${JSON.stringify(out).replace(/</g, '&lt;')}</pre>`);
  },
  cookies: { keys: ['gridlane-test-idp-cookie-key'] },
  ttl: { Session: 3600, Interaction: 600, Grant: 3600, IdToken: 600, AccessToken: 600, AuthorizationCode: 60 },
});

// The tests' back door to the directory (loopback only, like the whole provider).
provider.use(async (ctx, next) => {
  const match = ctx.path.match(/^\/test\/accounts\/([A-Za-z0-9._-]{1,64})$/);
  if (!match) return next();
  const login = match[1];
  if (ctx.method === 'DELETE') {
    overrides.delete(login);
    ctx.status = 204;
    return undefined;
  }
  if (ctx.method !== 'PUT') {
    ctx.status = 405;
    return undefined;
  }
  const chunks = [];
  for await (const chunk of ctx.req) chunks.push(chunk);
  let body;
  try {
    body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch {
    ctx.status = 400;
    return undefined;
  }
  overrides.set(login, {
    ...(Array.isArray(body.groups) ? { groups: body.groups.map(String) } : {}),
    ...(typeof body.email === 'string' ? { email: body.email } : {}),
  });
  ctx.status = 204;
  return undefined;
});

const server = provider.listen(PORT, '127.0.0.1', () => {
  console.log(`test identity provider at ${ISSUER}`);
});
for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => server.close(() => process.exit(0)));
}
