// Filled in by the Service Bus emulator work (issue 12).
export {};
