; A kernel whose parameters pass 4 KiB, as front ends that pass tensors by value make
; them: a 4,400-byte byval struct after a pointer (4,408 bytes of parameters). Over 4,352
; bytes needs PTX ISA 8.1 and CUDA 12.1 (up to 32,764), which LLVM 14 cannot name, so:
; regen: .version 8.1
; out[0] = s.words[0], out[1] = s.words[1099] (its first and last words). Twin: llvm_kernels.c
target datalayout = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

%struct.Big = type { [1100 x i32] }

define void @llvm_big_param(i32 addrspace(1)* %out, %struct.Big* byval(%struct.Big) align 4 %s) {
  %p0 = getelementptr %struct.Big, %struct.Big* %s, i32 0, i32 0, i32 0
  %p1 = getelementptr %struct.Big, %struct.Big* %s, i32 0, i32 0, i32 1099
  %v0 = load i32, i32* %p0
  %v1 = load i32, i32* %p1
  %o1 = getelementptr i32, i32 addrspace(1)* %out, i32 1
  store i32 %v0, i32 addrspace(1)* %out
  store i32 %v1, i32 addrspace(1)* %o1
  ret void
}

!nvvm.annotations = !{!0}
!0 = !{void (i32 addrspace(1)*, %struct.Big*)* @llvm_big_param, !"kernel", i32 1}
