; A module with no kernels: a device function and a global only (a library module of
; helpers). Loading it works; looking a kernel up in it finds nothing.
target datalayout = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

@lookup = addrspace(1) global [2 x i32] [i32 5, i32 6], align 4

define i32 @llvm_helper(i32 %i) noinline {
  %p = getelementptr [2 x i32], [2 x i32] addrspace(1)* @lookup, i32 0, i32 %i
  %v = load i32, i32 addrspace(1)* %p
  ret i32 %v
}
