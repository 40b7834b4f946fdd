/**
 * The transforms module of the flink-compare example, in the shape `onceflow worker
 * --transforms <module>` loads: an exported `transforms` registry.
 */
import { TransformRegistry } from '../../src/transforms/registry';
import { compareTransform } from './transform';

export const transforms = new TransformRegistry().register('flink-compare', compareTransform);

/** A fresh registry with the example's transform (for tools that register more of their own). */
export const compareTransforms = () => new TransformRegistry().register('flink-compare', compareTransform);
