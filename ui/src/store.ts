// A value that components can watch: the smallest store that does the job.

import { useEffect, useState } from "preact/hooks";

export interface Store<T> {
  get(): T;
  set(value: T): void;
  subscribe(f: (value: T) => void): () => void;
}

export function store<T>(initial: T): Store<T> {
  let value = initial;
  const watchers = new Set<(value: T) => void>();
  return {
    get: () => value,
    set(next) {
      value = next;
      for (const f of [...watchers]) f(next);
    },
    subscribe(f) {
      watchers.add(f);
      return () => watchers.delete(f);
    },
  };
}

export function useStore<T>(s: Store<T>): T {
  const [value, setValue] = useState(s.get());
  useEffect(() => {
    setValue(s.get());
    return s.subscribe(setValue);
  }, [s]);
  return value;
}
