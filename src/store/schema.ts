// The metadata schema is assembled by declaration merging: each area (and the platform) adds its own
// tables to `Tables` in its own repo file, so no single file lists every area's tables.
// biome-ignore lint/suspicious/noEmptyInterface: augmented by areas
export interface Tables {}
