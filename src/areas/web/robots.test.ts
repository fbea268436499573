import { describe, expect, it } from 'vitest';
import { parseRobots, robotsAllows } from './robots.js';
import { searxngLanguage } from './search-provider.js';

describe('robots.txt for *', () => {
  const rules = parseRobots(
    [
      'User-agent: googlebot',
      'Disallow: /',
      '',
      'User-agent: other',
      'User-agent: *',
      'Disallow: /private/ # comment',
      'Disallow: /*.pdf$',
      'Allow: /private/open',
      'Disallow:',
      'Sitemap: https://x.example/sitemap.xml',
    ].join('\r\n'),
  );

  it('keeps only the rules of the group naming *', () => {
    expect(rules).toEqual({ disallow: ['/private/', '/*.pdf$'], allow: ['/private/open'] });
  });

  it('applies the longest match, Allow winning a tie, with * and $', () => {
    expect(robotsAllows(rules, '/')).toBe(true);
    expect(robotsAllows(rules, '/private/x')).toBe(false);
    expect(robotsAllows(rules, '/private/open/page')).toBe(true);
    expect(robotsAllows(rules, '/docs/a.pdf')).toBe(false);
    expect(robotsAllows(rules, '/docs/a.pdf?x=1')).toBe(true);
    expect(robotsAllows(parseRobots('User-agent: *\nDisallow: /\nAllow: /$'), '/')).toBe(true);
    expect(robotsAllows(parseRobots('User-agent: *\nDisallow: /\nAllow: /$'), '/a')).toBe(false);
  });

  it('allows everything without rules for *', () => {
    expect(robotsAllows(parseRobots('User-agent: bot\nDisallow: /'), '/x')).toBe(true);
    expect(robotsAllows(parseRobots(''), '/x')).toBe(true);
  });
});

describe('SearXNG language from a country', () => {
  it('maps known countries to <lang>-<CC> and others to none', () => {
    expect(searxngLanguage('mx')).toBe('es-MX');
    expect(searxngLanguage('US')).toBe('en-US');
    expect(searxngLanguage('jp')).toBeUndefined();
    expect(searxngLanguage(undefined)).toBeUndefined();
  });
});
