import type { JsonSchema } from '../../../src/platform/json-schema.js';
import type { OpEntry } from '../../sdk/scripts/operations-module.js';
import {
  collectEntries,
  hoistLocalDefs,
  primaryOperationIds,
  registryDoc,
} from '../../sdk/scripts/sdk-generator.js';
import { buildResources, HAND_WRITTEN, type OpDoc } from './python-resources.js';
import { PY_HEADER, pyStr, TypeEmitter } from './python-types.js';

export { PY_HEADER };

/**
 * The generated files of the Python SDK, keyed by path relative to packages/python; nothing is written
 * here. Same registry, same OpenAPI document and same operation table as the TypeScript SDK's.
 */
export function generatePythonFiles(): Record<string, string> {
  const raw = registryDoc();
  const entries = collectEntries(raw, primaryOperationIds());
  const doc = hoistLocalDefs(structuredClone(raw));
  const ops = new Map<string, OpDoc>();
  for (const [path, item] of Object.entries(doc.paths as Record<string, Record<string, JsonSchema>>)) {
    for (const [method, op] of Object.entries(item)) {
      const entry = entries.find((e) => e.path === path && e.method === method.toUpperCase());
      if (entry) ops.set(entry.id, { entry, op });
    }
  }
  const types = new TypeEmitter(doc);
  types.emitComponents();
  const resources = buildResources([...ops.values()], types);
  return {
    'src/nube/_operations_gen.py': operationsModule(entries),
    'src/nube/types.py': typesModule(types.code()),
    'src/nube/_resources_gen.py': resources.sync,
    'src/nube/_aio_resources_gen.py': resources.async,
  };
}

function operationsModule(entries: OpEntry[]): string {
  const tuple = (xs: string[]) =>
    xs.length ? `(${xs.map(pyStr).join(', ')}${xs.length === 1 ? ',' : ''})` : '()';
  const lines = [
    PY_HEADER.trimEnd(),
    '"""Every operation of the API: how to send it (the table the TypeScript SDK dispatches from, too)."""',
    'from typing import Dict',
    '',
    'from ._operation import Operation',
    '',
    'OPERATIONS: Dict[str, Operation] = {',
  ];
  for (const e of entries) {
    lines.push(
      `    ${pyStr(e.id)}: Operation(${pyStr(e.method)}, ${pyStr(e.path)}, ${tuple(e.pathParams)}, ${tuple(e.query)}, ${pyStr(e.body)}, ${pyStr(e.contentType)}, ${e.success}, ${e.implemented ? 'True' : 'False'}, ${HAND_WRITTEN.has(e.id) ? 'True' : 'False'}),`,
    );
  }
  lines.push('}');
  return `${lines.join('\n')}\n`;
}

function typesModule(code: string): string {
  return `${PY_HEADER}"""Request and response types of every operation, as TypedDicts (the wire's own field names).

Responses are plain dicts at run time; these types are for the type checker and the editor. Classes
come before their first use (no forward references: a TypedDict's string annotations are compiled one by
one when the module loads, which made importing nube several times slower).
"""
from typing import Any, Dict, List, Literal, Optional, TypedDict, Union


${code}
`;
}
