//! The plugin's allocator: an arena that forgets everything at once. A call
//! of a policy allocates its input (the host writes it in through
//! `cabi_realloc`), its work and its answer, and by the end of the call's
//! post-return every one of those allocations has been freed. So the arena
//! only bumps a pointer to allocate, counts the allocations alive, and when
//! the count falls to zero starts over from the bottom. Linear memory grows
//! to the largest call and is reused by every later one.
//!
//! Should something stay allocated between calls, the arena keeps bumping
//! (memory grows until the host's memory limit stops the instance, which
//! the host then replaces): a loss of speed, never of correctness.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;

const PAGE: usize = 64 * 1024;

pub struct Arena {
    /// Where the arena starts (the first page it grew), 0 before any.
    bottom: Cell<usize>,
    next: Cell<usize>,
    end: Cell<usize>,
    live: Cell<usize>,
}

// A component instance runs one thread.
unsafe impl Sync for Arena {}

impl Arena {
    pub const fn new() -> Self {
        Self {
            bottom: Cell::new(0),
            next: Cell::new(0),
            end: Cell::new(0),
            live: Cell::new(0),
        }
    }

    /// Grow linear memory so that `[start, start + size)` fits.
    fn grow(&self, start: usize, size: usize) -> bool {
        let need = start + size - self.end.get();
        let pages = need.div_ceil(PAGE);
        let previous = core::arch::wasm32::memory_grow(0, pages);
        if previous == usize::MAX {
            return false;
        }
        if self.end.get() != previous * PAGE {
            // Memory grew elsewhere (or this is the first growth): start
            // from the new pages.
            self.next.set(previous * PAGE);
            if self.bottom.get() == 0 {
                self.bottom.set(previous * PAGE);
            }
        }
        self.end.set((previous + pages) * PAGE);
        true
    }
}

unsafe impl GlobalAlloc for Arena {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let align = layout.align();
        let mut start = (self.next.get() + align - 1) & !(align - 1);
        if start + layout.size() > self.end.get() {
            if !self.grow(start, layout.size()) {
                return core::ptr::null_mut();
            }
            start = (self.next.get() + align - 1) & !(align - 1);
            if start + layout.size() > self.end.get() && !self.grow(start, layout.size()) {
                return core::ptr::null_mut();
            }
        }
        self.next.set(start + layout.size());
        self.live.set(self.live.get() + 1);
        start as *mut u8
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let live = self.live.get() - 1;
        self.live.set(live);
        if live == 0 {
            self.next.set(self.bottom.get());
        } else if ptr as usize + layout.size() == self.next.get() {
            // The latest allocation: give its room back.
            self.next.set(ptr as usize);
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // The latest allocation grows in place when there is room.
        if ptr as usize + layout.size() == self.next.get()
            && ptr as usize + new_size <= self.end.get()
        {
            self.next.set(ptr as usize + new_size);
            return ptr;
        }
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            unsafe {
                core::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        new
    }
}
