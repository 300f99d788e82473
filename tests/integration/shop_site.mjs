// A small site on the host's loopback, reached from sandboxes as shop.test through cabind's
// egress proxy: /login sets a lasting cookie (sid) and a session cookie (visit), /logout drops
// sid, /slow never finishes loading, and every other page's title says who is there: "hello <sid>" or "anonymous", then the
// visit cookie ("new" without it), then the path.
import http from 'node:http';
import { after } from 'node:test';

import { Cdp, startCabind } from './helpers.mjs';

export async function startShop() {
  const site = http.createServer((req, res) => {
    res.setHeader('content-type', 'text/html');
    if (req.url === '/login') {
      res.setHeader('set-cookie', ['sid=opensesame; Max-Age=86400; Path=/', 'visit=once; Path=/']);
      res.end('<title>logged in</title>');
    } else if (req.url === '/slow') {
      // A page that never finishes loading: its image never comes.
      res.end('<title>still loading</title><img src="/stall">');
    } else if (req.url === '/stall') {
      res.flushHeaders();
    } else if (req.url === '/logout') {
      res.setHeader('set-cookie', 'sid=; Max-Age=0; Path=/');
      res.end('<title>logged out</title>');
    } else {
      const cookies = req.headers.cookie || '';
      const sid = /(?:^|; )sid=(\w+)/.exec(cookies)?.[1];
      const visit = /(?:^|; )visit=(\w+)/.exec(cookies)?.[1];
      res.end(`<title>${sid ? `hello ${sid}` : 'anonymous'} ${visit ?? 'new'} ${req.url}</title>`);
    }
  });
  await new Promise((resolve) => site.listen(0, '127.0.0.1', resolve));
  const port = site.address().port;
  return {
    port,
    origin: `http://shop.test:${port}`,
    // What a session needs to reach it, and what cabind needs to let it.
    network: { mode: 'allowlist', allow: [{ host: 'shop.test', ports: [port] }] },
    cabindArgs: ['--egress-resolve', 'shop.test=127.0.0.1', '--egress-allow-host-cidr', '127.0.0.1/32'],
    close: () => {
      site.closeAllConnections();
      site.close();
    },
  };
}

// The site and a cabind that lets sessions reach it (with `args` besides), both stopped after
// the file's tests.
export async function shopAndCabind({ args = [] } = {}) {
  const shop = await startShop();
  const server = await startCabind({ args: [...shop.cabindArgs, ...args] });
  after(async () => {
    await server.stop();
    shop.close();
  });
  return { shop, server };
}

// The session's first page: its title, and what `expression` evaluates to there.
export async function onPage(s, expression = 'null') {
  const cdp = await Cdp.connect(s.cdp_url);
  try {
    const { targetInfos } = await cdp.send('Target.getTargets');
    const page = targetInfos.find((t) => t.type === 'page');
    const { sessionId } = await cdp.send('Target.attachToTarget', {
      targetId: page.targetId, flatten: true,
    });
    const r = await cdp.send('Runtime.evaluate', {
      expression: `[document.title, ${expression}]`, returnByValue: true,
    }, sessionId);
    const [title, value] = r.result.value;
    return { title, value };
  } finally {
    await cdp.close();
  }
}
