export * from './errors.js';
export { assertValidKey } from './keys.js';
export { LocalBlobStore, type LocalBlobStoreOptions } from './local.js';
export { S3BlobStore, type S3BlobStoreOptions } from './s3.js';
export { type BlobHttpResponse, type RequestHeaders, receiveUpload, serveBlob, type UploadGrant } from './serve.js';
export {
  type BlobLocationOptions,
  type BlobStores,
  type BlobStoresOptions,
  createBlobStores,
  makeClient as makeS3Client,
  type S3ConnectionOptions,
} from './stores.js';
export type * from './types.js';
export { type TokenMethod, UrlTokenSigner, type VerifiedToken } from './url-token.js';
