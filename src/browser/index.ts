export { ChromiumBrowser, type ChromiumOptions } from './chromium.js';
export * from './types.js';
